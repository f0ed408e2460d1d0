//! Names of fieldless enums on the command line and in config files.
//!
//! Every setting with a fixed set of values (`--splice on|off|auto`,
//! `--send`, `--cache-policy`, `--dist`, `--log-level`, ...) maps words to
//! variants both ways; [`enum_names!`](crate::enum_names) writes that table
//! once per enum instead of a `name` match and a `FromStr` match kept in step
//! by hand.

/// Implement `name()` (the variant's first word) and `FromStr` (any of its
/// words) for a fieldless enum. An unknown word is refused with
/// ``unknown WHAT `word` (expected a|b|c)``, listing the first words; or,
/// given `error = "..."` in place of WHAT, with that message, where `{s}`
/// stands for the word (for settings whose message was worded before this
/// table and stays as users know it).
///
/// ```
/// #[derive(Clone, Copy, Debug, PartialEq)]
/// enum Mode { On, Off }
/// weft_core::enum_names!(Mode, "mode", { On => "on" | "yes", Off => "off" });
/// assert_eq!("yes".parse::<Mode>(), Ok(Mode::On));
/// assert_eq!(Mode::Off.name(), "off");
/// assert_eq!("x".parse::<Mode>(), Err("unknown mode `x` (expected on|off)".to_string()));
///
/// #[derive(Clone, Copy, Debug, PartialEq)]
/// enum Side { Left, Right }
/// weft_core::enum_names!(Side, error = "no side `{s}` (left or right)", { Left => "left", Right => "right" });
/// assert_eq!("up".parse::<Side>(), Err("no side `up` (left or right)".to_string()));
/// ```
#[macro_export]
macro_rules! enum_names {
    ($ty:ident, error = $msg:literal, { $($var:ident => $name:literal $(| $alias:literal)*),+ $(,)? }) => {
        $crate::enum_names!(@impl $ty, |s| format!($msg, s = s), { $($var => $name $(| $alias)*),+ });
    };
    ($ty:ident, $what:literal, { $($var:ident => $name:literal $(| $alias:literal)*),+ $(,)? }) => {
        $crate::enum_names!(@impl $ty, |s| format!(
            "unknown {} `{s}` (expected {})",
            $what,
            [$($name),+].join("|")
        ), { $($var => $name $(| $alias)*),+ });
    };
    (@impl $ty:ident, |$s:ident| $err:expr, { $($var:ident => $name:literal $(| $alias:literal)*),+ }) => {
        impl $ty {
            /// The word the command line and config files use for this value.
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$var => $name,)+
                }
            }
        }

        impl ::std::str::FromStr for $ty {
            type Err = String;
            fn from_str($s: &str) -> Result<Self, String> {
                match $s {
                    $($name $(| $alias)* => Ok($ty::$var),)+
                    _ => Err($err),
                }
            }
        }
    };
}
