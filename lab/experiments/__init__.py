"""The experiments `python3 -m lab run NAME` knows. Each module has NAME,
DESCRIPTION and run(lab) -> dict."""

from . import (
    connection_scaling,
    epoll_study,
    event_syscalls,
    idle_memory,
    lard_cluster,
    lard_sim,
    load_calibration,
    polymix,
    proxy_splice,
    proxy_ssl,
    send_path,
    static_baseline,
    wan_proxy,
    wan_server,
)

EXPERIMENTS = {
    m.NAME: m
    for m in (
        static_baseline,
        event_syscalls,
        send_path,
        load_calibration,
        epoll_study,
        connection_scaling,
        idle_memory,
        proxy_splice,
        proxy_ssl,
        polymix,
        lard_sim,
        lard_cluster,
        wan_proxy,
        wan_server,
    )
}
