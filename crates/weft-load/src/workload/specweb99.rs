//! The static part of SPECweb99 (see workloads.md §1): `dirs` directories of 4
//! classes × 9 files, class mix 35/50/14/1 %, Zipf(1) over directories, the
//! within-class popularity of Brecht's `genspec99sesslogs.c`, and sessions of 1
//! request (30 %, HTTP/1.0 style) or 5..15 keep-alive requests.

use super::Params;
use crate::dist::Table;
use crate::urls::specweb99_size;
use rand::rngs::SmallRng;
use rand::Rng;

/// Class access probabilities.
pub const CLASS_MIX: [f64; 4] = [0.35, 0.50, 0.14, 0.01];
/// Popularity of the 9 files within a class (genspec99sesslogs.c `filePDF`).
pub const FILE_MIX: [f64; 9] = [0.039, 0.059, 0.088, 0.177, 0.353, 0.118, 0.071, 0.050, 0.044];
/// Bytes in one directory.
pub const BYTES_PER_DIR: u64 = 5_119_484;

/// The file set and its access pattern.
#[derive(Clone, Debug)]
pub struct SpecWeb99 {
    /// Number of directories.
    pub dirs: usize,
    /// Path prefix before `/dirNNNNN` (e.g. `/file_set`).
    pub prefix: String,
    dir_table: Table,
    class_table: Table,
    file_table: Table,
}

/// SPECweb99's directory count for a target of `conns` simultaneous connections
/// (the whitepaper's formula as recorded in workloads.md; unconfirmed there).
pub fn dirs_for_connections(conns: u64) -> usize {
    (25.0 + (400_000.0 / 122_000.0) * conns as f64 / 5.0) as usize
}

/// Requests in one connection: 30 % one, else 5..15 uniformly.
pub fn session_length(rng: &mut SmallRng) -> u32 {
    if rng.gen::<f64>() < 0.30 {
        1
    } else {
        (5.0 + rng.gen::<f64>() * 11.0).floor() as u32
    }
}

impl SpecWeb99 {
    /// A file set of `dirs` directories under `prefix`.
    pub fn new(dirs: usize, prefix: &str) -> SpecWeb99 {
        SpecWeb99 {
            dirs,
            prefix: prefix.trim_end_matches('/').to_string(),
            dir_table: Table::zipf(dirs, 1.0),
            class_table: Table::new(&CLASS_MIX),
            file_table: Table::new(&FILE_MIX),
        }
    }

    /// From `--param dirs=N` or `conns=C`, and `prefix=/P`.
    pub fn from_params(p: &mut Params) -> Result<SpecWeb99, String> {
        let conns = p.u64("conns", 0, 0..=1_000_000)?;
        let dirs = p.u64(
            "dirs",
            if conns > 0 {
                dirs_for_connections(conns) as u64
            } else {
                10
            },
            1..=100_000,
        )? as usize;
        let prefix = p.take("prefix").unwrap_or_default();
        if !prefix.is_empty() && !prefix.starts_with('/') {
            return Err(format!("invalid --param prefix=`{prefix}` (must start with /)"));
        }
        p.finish("specweb99", &["dirs", "conns", "prefix"])?;
        Ok(SpecWeb99::new(dirs, &prefix))
    }

    /// Draw (directory, class, file) independently.
    pub fn pick(&self, rng: &mut SmallRng) -> (usize, usize, usize) {
        (
            self.dir_table.sample(rng),
            self.class_table.sample(rng),
            self.file_table.sample(rng),
        )
    }

    /// Write the path of a drawn file into `buf`; returns its length.
    pub fn pick_path(&self, rng: &mut SmallRng, buf: &mut [u8; 64]) -> usize {
        let (d, c, f) = self.pick(rng);
        self.path_into(d, c, f, buf)
    }

    /// `PREFIX/dirDDDDD/classC_F` into `buf`.
    pub fn path_into(&self, d: usize, c: usize, f: usize, buf: &mut [u8; 64]) -> usize {
        let p = self.prefix.as_bytes();
        let p = &p[..p.len().min(30)];
        let mut n = 0;
        buf[..p.len()].copy_from_slice(p);
        n += p.len();
        buf[n..n + 4].copy_from_slice(b"/dir");
        n += 4;
        let mut digits = [b'0'; 5];
        let mut x = d;
        for i in (0..5).rev() {
            digits[i] = b'0' + (x % 10) as u8;
            x /= 10;
        }
        buf[n..n + 5].copy_from_slice(&digits);
        n += 5;
        buf[n..n + 6].copy_from_slice(b"/class");
        n += 6;
        buf[n] = b'0' + c as u8;
        buf[n + 1] = b'_';
        buf[n + 2] = b'0' + f as u8;
        n + 3
    }

    /// Every file: (path, size), for `weft load gen specweb99`.
    pub fn files(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        (0..self.dirs).flat_map(move |d| {
            (0..4).flat_map(move |c| {
                (0..9).map(move |f| {
                    let mut buf = [0u8; 64];
                    let n = self.path_into(d, c, f, &mut buf);
                    (String::from_utf8_lossy(&buf[..n]).into_owned(), specweb99_size(c, f))
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn file_set_layout() {
        let s = SpecWeb99::new(3, "/file_set");
        let files: Vec<(String, u64)> = s.files().collect();
        assert_eq!(files.len(), 3 * 36);
        assert_eq!(files[0], ("/file_set/dir00000/class0_0".to_string(), 102));
        assert_eq!(files[35], ("/file_set/dir00000/class3_8".to_string(), 921_600));
        let per_dir: u64 = files[..36].iter().map(|f| f.1).sum();
        assert_eq!(per_dir, BYTES_PER_DIR);
        let class_totals: Vec<u64> = (0..4)
            .map(|c| files[c * 9..c * 9 + 9].iter().map(|f| f.1).sum())
            .collect();
        assert_eq!(class_totals, vec![4_604, 46_080, 460_800, 4_608_000]);
        assert_eq!(files[107].0, "/file_set/dir00002/class3_8");
        for (p, size) in &files {
            assert_eq!(crate::urls::parse(p.as_bytes()).unwrap().size, *size, "{p}");
        }
        assert_eq!(dirs_for_connections(1020), 693);
    }

    #[test]
    fn class_file_and_directory_mix() {
        let s = SpecWeb99::new(50, "");
        let mut rng = SmallRng::seed_from_u64(1999);
        let n = 400_000;
        let mut class = [0usize; 4];
        let mut file = [0usize; 9];
        let mut dir0 = 0usize;
        let mut bytes = 0u64;
        for _ in 0..n {
            let (d, c, f) = s.pick(&mut rng);
            class[c] += 1;
            file[f] += 1;
            dir0 += (d == 0) as usize;
            bytes += specweb99_size(c, f);
        }
        for c in 0..4 {
            let got = class[c] as f64 / n as f64;
            assert!(
                (got - CLASS_MIX[c]).abs() < 0.1 * CLASS_MIX[c] + 0.002,
                "class {c}: {got}"
            );
        }
        for f in 0..9 {
            let got = file[f] as f64 / n as f64;
            assert!(
                (got - FILE_MIX[f]).abs() < 0.05 * FILE_MIX[f] + 0.001,
                "file {f}: {got}"
            );
        }
        let h: f64 = (1..=50).map(|i| 1.0 / i as f64).sum();
        let got = dir0 as f64 / n as f64;
        assert!((got - 1.0 / h).abs() < 0.01, "directory 0: {got}");
        // Mean response ≈ 14 KB (Ruan et al.).
        let mean = bytes as f64 / n as f64;
        assert!((12_000.0..17_000.0).contains(&mean), "mean size {mean}");
    }

    #[test]
    fn session_lengths() {
        let mut rng = SmallRng::seed_from_u64(5);
        let n = 100_000;
        let mut ones = 0;
        let mut sum = 0u64;
        for _ in 0..n {
            let l = session_length(&mut rng);
            assert!(l == 1 || (5..=15).contains(&l));
            ones += (l == 1) as usize;
            sum += l as u64;
        }
        assert!((ones as f64 / n as f64 - 0.30).abs() < 0.01);
        // 0.3·1 + 0.7·10 = 7.3
        assert!((sum as f64 / n as f64 - 7.3).abs() < 0.1);
    }

    #[test]
    fn params() {
        let mut p = Params::parse(&["conns=1020".into()]).unwrap();
        assert_eq!(SpecWeb99::from_params(&mut p).unwrap().dirs, 693);
        let mut p = Params::parse(&["prefix=x".into()]).unwrap();
        assert!(SpecWeb99::from_params(&mut p).is_err());
    }
}
