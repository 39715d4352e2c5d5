"""SM clock and board power sampled while a benchmark runs (bench/compare.py --clocks).

Under the power cap the SM clock falls, and a kernel that spends less energy per tile keeps a
higher clock: two kernels of equal cycles differ in time by their clocks. So compare.py can
report, per (workload, method), the median SM clock and mean power over the timed calls.

A background thread reads NVML (the `pynvml` module of nvidia-ml-py, which FlashInfer's offline
copy installs) every `period_s`; without NVML it reads `nvidia-smi --query-gpu=clocks.sm,power.draw
-lms`. Samples carry host monotonic times, so a window [t0, t1] of time.perf_counter() selects the
samples taken while that window's calls ran. `stats(t0, t1)` (window_stats) returns None when there are fewer
than 3 samples in the window (a window shorter than ~3 periods).
"""
from __future__ import annotations

import statistics
import subprocess
import threading
import time


def window_stats(samples, t0, t1):
    """Median SM clock and mean power of the (time, MHz, W) samples taken in [t0, t1]."""
    win = [(m, w) for t, m, w in samples if t0 <= t <= t1]
    if len(win) < 3:
        return None
    return {"sm_clock_mhz": statistics.median(m for m, _ in win),
            "power_w": statistics.fmean(w for _, w in win), "clock_samples": len(win)}


class ClockSampler:
    def __init__(self, device_index=0, period_s=0.005):
        self.period_s = period_s
        self.samples = []  # (perf_counter, sm_mhz, watts)
        self.source = None
        self._stop = threading.Event()
        self._proc = None
        try:
            import pynvml
            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            self.source = "nvml"
            self._thread = threading.Thread(target=self._nvml_loop, daemon=True)
        except Exception:  # noqa: BLE001
            self._nvml = None
            ms = max(int(period_s * 1000), 10)
            self._proc = subprocess.Popen(
                ["nvidia-smi", "-i", str(device_index), "--query-gpu=clocks.sm,power.draw",
                 "--format=csv,noheader,nounits", f"-lms={ms}"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self.source = "nvidia-smi"
            self._thread = threading.Thread(target=self._smi_loop, daemon=True)
        self._thread.start()

    def _nvml_loop(self):
        n = self._nvml
        while not self._stop.is_set():
            try:
                mhz = n.nvmlDeviceGetClockInfo(self._handle, n.NVML_CLOCK_SM)
                watts = n.nvmlDeviceGetPowerUsage(self._handle) / 1000.0
                self.samples.append((time.perf_counter(), float(mhz), watts))
            except Exception:  # noqa: BLE001
                pass
            time.sleep(self.period_s)

    def _smi_loop(self):
        for line in self._proc.stdout:
            if self._stop.is_set():
                break
            try:
                mhz, watts = (float(x) for x in line.split(","))
                self.samples.append((time.perf_counter(), mhz, watts))
            except ValueError:
                continue

    def stats(self, t0, t1):
        return window_stats(self.samples, t0, t1)

    def close(self):
        self._stop.set()
        if self._proc is not None:
            self._proc.terminate()
        self._thread.join(timeout=1.0)
