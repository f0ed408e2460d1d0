"""The experiments `python3 -m lab run NAME` knows. Each module has NAME,
DESCRIPTION and run(lab) -> dict."""

from . import (
    cgi,
    connection_scaling,
    epoll_study,
    event_syscalls,
    faults,
    flash_arch,
    flash_breakdown,
    idle_memory,
    iolite,
    lard_cluster,
    lard_sim,
    load_calibration,
    polymix,
    proxy_events,
    proxy_splice,
    proxy_ssl,
    send_path,
    soak,
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
        proxy_events,
        lard_sim,
        lard_cluster,
        cgi,
        flash_arch,
        flash_breakdown,
        iolite,
        wan_proxy,
        wan_server,
        soak,
        faults,
    )
}
