"""proxy-events (issue 27): the plan's length, its parts, and the pure
arithmetic of its summary."""

from lab.experiments import proxy_events as pe


def test_quick_form_fits_and_parts_cover_the_plan():
    assert pe.plan(True).estimate_s() <= 80
    whole = pe.plan(False)
    union = []
    for part in pe.PARTS:
        pn = pe.plan(False, [part])
        assert pn.points and pn.estimate_s() <= 600, (part, pn.estimate_s())
        union += pn.points
    assert sorted(map(repr, union)) == sorted(map(repr, whole.points))
    busy = {p.proxy for p in whole.points if p.section == "busy"}
    assert busy == {pe.weft_label("epoll", "on"), pe.weft_label("tracked", "on"), pe.weft_label("tracked", "on", pe.BUSY_WAKE)}
    assert pe.spec(pe.Point("busy", pe.weft_label("tracked", "on"), 0, pe.BUSY_RATE), 9).options["extra"] == ["--splice", "on"]
    batched = pe.spec(pe.Point("busy", pe.weft_label("tracked", "on", pe.BUSY_WAKE), 0, pe.BUSY_RATE), 9)
    assert batched.options["extra"] == ["--splice", "on", "--wake-interval", pe.BUSY_WAKE]
    labels = {p.proxy for p in whole.points if p.section == "polymix"}
    for e in ("select", "epoll", "tracked"):
        for s in ("on", "off"):
            assert pe.weft_label(e, s) in labels


def test_specs_pass_event_and_splice():
    p = pe.Point("fig8", pe.weft_label("tracked", "on"), 65536, 500)
    s = pe.spec(p, 8080)
    assert s.options["event"] == "tracked"
    assert s.options["extra"] == ["--splice", "on", "--upstream", "127.0.0.1:8080"]
    s = pe.spec(pe.Point("polymix", pe.weft_label("select", "off"), 0, 300), 9)
    assert s.options["event"] == "select" and s.options["extra"] == ["--splice", "off"]
    assert pe.spec(pe.Point("fig8", pe.HS, 65536, 500), 8080).kind == "haproxy-splice"


def test_per_request_counts_event_calls_and_paths():
    w = {"syscalls": {"epoll_wait": 30, "epoll_ctl": 10, "io_uring_enter": 0, "splice": 200, "read": 5},
         "calls_splice_in": 100, "calls_splice_out": 100, "calls_tee": 0}  # fmt: skip
    pr = pe.per_request(w, 100)
    assert pr["event_calls"] == 0.4
    assert pr["paths"] == {"splice_in": 1.0, "splice_out": 1.0}
    assert list(pr["syscalls"]) == ["splice", "epoll_wait", "epoll_ctl", "read"]
    assert pe.per_request({}, 10) == {} and pe.per_request(w, 0) == {}


def test_additivity_and_target():
    def m(us, ev):
        return {"proxy_us": us, "event_calls": ev}

    med = {("polymix", pe.weft_label("epoll", "off"), 0, 300): m(100.0, 1.0),
           ("polymix", pe.weft_label("tracked", "off"), 0, 300): m(90.0, 0.1),
           ("polymix", pe.weft_label("epoll", "on"), 0, 300): m(80.0, 1.2),
           ("polymix", pe.weft_label("tracked", "on"), 0, 300): m(75.0, 0.1)}  # fmt: skip
    a = pe.additivity(med, 300)
    assert "tracking saves 10.0" in a and "splicing 20.0" in a and "both together 25.0" in a and "do not add up" in a
    assert pe.additivity(med, 500) is None
    med[("polymix", pe.weft_label("tracked", "on", pe.WAKE), 0, 300)] = m(70.0, 0.05)
    t, tw, tb, tbw = pe.targets(med)
    assert abs(t.value - 0.1 / 1.1) < 1e-9 and t.met
    assert abs(tw.value - 0.05 / 1.1) < 1e-9
    assert tb.value is None and not tb.met  # no busy points: not measured, not met
    assert tbw.value is None and not tbw.met
    # The busy part's points count for its own targets only.
    med[("busy", pe.weft_label("epoll", "on"), 0, pe.BUSY_RATE)] = m(50.0, 2.0)
    med[("busy", pe.weft_label("tracked", "on"), 0, pe.BUSY_RATE)] = m(45.0, 0.3)
    med[("busy", pe.weft_label("tracked", "on", pe.BUSY_WAKE), 0, pe.BUSY_RATE)] = m(44.0, 0.5)
    t2, _, tb, tbw = pe.targets(med)
    assert t2.value == t.value
    assert abs(tb.value - 0.15) < 1e-9 and tb.met
    assert abs(tbw.value - 0.25) < 1e-9 and not tbw.met


def test_labels_round_trip():
    for args in (("epoll", "on", ""), ("tracked", "off", ""), ("tracked", "on", "5ms")):
        assert pe.parse_label(pe.weft_label(*args)) == args
    s = pe.spec(pe.Point("polymix", pe.weft_label("tracked", "on", "5ms"), 0, 300), 9)
    assert s.options["extra"] == ["--splice", "on", "--wake-interval", "5ms"]
