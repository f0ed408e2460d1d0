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


def test_schedstat_sample_of_a_fake_proc(tmp_path):
    def proc_entry(pid, ppid, ut, st, threads):
        d = tmp_path / str(pid)
        (d / "task").mkdir(parents=True)
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(ut), str(st)] + ["0"] * 8
        (d / "stat").write_text(f"{pid} (srv) " + " ".join(fields))
        for tid, ns in threads.items():
            (d / "task" / str(tid)).mkdir()
            (d / "task" / str(tid) / "schedstat").write_text(f"{ns} 999 7\n")

    proc_entry(100, 1, 10, 5, {100: 1_000_000, 103: 2_500_000})
    proc_entry(101, 100, 3, 2, {101: 500})
    proc_entry(200, 1, 9, 9, {200: 777})  # unrelated
    s = proc.tree_cpu_sample(100, proc=str(tmp_path))
    assert s.ns == 3_500_500
    assert s.ticks == 20
    assert s.tids == frozenset({100, 101, 103})
    assert s.slices == {100: 7, 101: 7, 103: 7}


def test_switches_between_counts_each_thread_from_its_first_sample():
    a = proc.CpuSample(ns=0, ticks=0, tids=frozenset({1, 2}), slices={1: 10, 2: 5})
    b = proc.CpuSample(ns=0, ticks=0, tids=frozenset({1, 3}), slices={1: 25, 3: 4})
    # Thread 1: 15 more; thread 2 ended (its count is gone); thread 3 is new.
    assert proc.switches_between(a, b) == 19
    assert proc.parse_schedstat_slices("123 456 7\n") == 7


def test_cpu_seconds_between_uses_ns_unless_a_thread_exited():
    a = proc.CpuSample(ns=1_000_000_000, ticks=100, tids=frozenset({1, 2}))
    b = proc.CpuSample(ns=1_250_000_000, ticks=125, tids=frozenset({1, 2, 3}))
    assert proc.cpu_seconds_between(a, b) == 0.25
    gone = proc.CpuSample(ns=1_100_000_000, ticks=100 + proc.CLK_TCK // 2, tids=frozenset({1}))
    assert proc.cpu_seconds_between(a, gone) == (proc.CLK_TCK // 2) / proc.CLK_TCK
    assert proc.parse_schedstat("123 456 7\n") == 123


def test_tree_cpu_sample_of_this_process_grows():
    import os

    a = proc.tree_cpu_sample(os.getpid())
    sum(i * i for i in range(300_000))
    b = proc.tree_cpu_sample(os.getpid())
    assert b.ns > a.ns and os.getpid() in b.tids


def test_kernel_threads_of_a_fake_proc(tmp_path):
    for pid, comm, ns in ((3, "kworker/0:1", 500), (4, "ksoftirqd/1", 70), (9, "weft", 1000)):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "comm").write_text(comm + "\n")
        (d / "schedstat").write_text(f"{ns} 0 0\n")
    (tmp_path / "self").mkdir()
    assert proc.kernel_threads_ns(str(tmp_path)) == 570
