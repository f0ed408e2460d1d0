from lab import proc


def test_parse_stat_handles_spaces_and_parens_in_comm():
    line = "4242 (weft (worker) 1) S 4000 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 3 0 99 0 0"
    s = proc.parse_stat(line)
    assert (s.pid, s.comm, s.ppid, s.utime, s.stime) == (4242, "weft (worker) 1", 4000, 1234, 567)


def test_descendants_follow_the_parent_chain_only():
    parent_of = {10: 1, 11: 10, 12: 11, 13: 1, 14: 12}
    assert proc.descendants(10, parent_of) == {10, 11, 12, 14}
    assert proc.descendants(13, parent_of) == {13}


def test_tree_cpu_of_a_fake_proc(tmp_path):
    def stat(pid, ppid, ut, st):
        d = tmp_path / str(pid)
        d.mkdir()
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(ut), str(st)] + ["0"] * 8
        (d / "stat").write_text(f"{pid} (srv) " + " ".join(fields))

    stat(100, 1, 10, 5)  # master
    stat(101, 100, 300, 200)  # worker
    stat(200, 1, 999, 999)  # unrelated
    (tmp_path / "self").mkdir()  # non-numeric entries are skipped
    assert proc.tree_cpu_ticks(100, proc=str(tmp_path)) == 515


def test_cpu_us_per_request():
    assert proc.cpu_us_per_request(0, 0) is None
    ticks = proc.CLK_TCK  # one second
    assert abs(proc.cpu_us_per_request(ticks, 1_000_000) - 1.0) < 1e-9


def test_tree_cpu_of_this_process_is_positive():
    import os

    sum(i * i for i in range(200_000))
    assert proc.tree_cpu_ticks(os.getpid()) >= 0
