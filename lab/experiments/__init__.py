"""The experiments `python3 -m lab run NAME` knows. Each module has NAME,
DESCRIPTION and run(lab) -> dict."""

from . import event_syscalls, load_calibration, polymix, proxy_splice, proxy_ssl, send_path, static_baseline

EXPERIMENTS = {m.NAME: m for m in (static_baseline, event_syscalls, send_path, load_calibration, proxy_splice, proxy_ssl, polymix)}
