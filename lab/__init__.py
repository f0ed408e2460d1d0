"""weft's lab: experiments that measure weft against nginx, h2o, lighttpd and
the other anchors on this machine, end to end, with one command each.

    python3 -m lab list
    python3 -m lab run NAME [--quick] [--driver wrk|weft-load]

Modules: `core` (the run context and one measured load run), `servers`
(starting and always stopping weft and the anchors), `drivers` (wrk and
`weft load` behind one interface), `proc` (server CPU from /proc), `report`
(medians, JSON/CSV, markdown, plots), `env` (requirements, builds, installs,
versions), and `experiments/` (one module per experiment).
"""
