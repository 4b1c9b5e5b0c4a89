"""The two ceilings a stage is measured against: FP32 CUDA cores and FP16 Tensor Cores.

Pure. A rubric override by GPU name wins (vendor datasheet figures, e.g. 66.9 and
989 TFLOP/s for H100/H200 SXM); otherwise the peak is derived from the device:
FLOP per SM per clock (by compute capability, from the rubric) x SMs x clock.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from grader.evidence.limits import Peaks
from grader.evidence.protocol import ProbeResult

# The two ceilings, by the names the rubric uses (a stage's `peak`, a fraction_of_peak item's `peak`).
PEAKS = ("fp32", "fp16_tensor")


@dataclass(frozen=True)
class PeakOverride:
    """A rubric's peaks for the GPUs whose name contains ``match`` (datasheet figures, TFLOP/s)."""

    match: str
    fp32: float
    fp16_tensor: float


def device_peaks(overrides: Sequence[PeakOverride], per_sm_clock: Mapping[str, Mapping[str, float]],
                 device: ProbeResult | None) -> Peaks:
    """The device's peaks: a rubric override by name first, else derived (rubric.yaml's ``peaks``:
    Rubric.peak_overrides and Rubric.peak_per_sm_clock)."""
    if device is None or not device.ok:
        return Peaks(None, None, "no device")
    name = device.name
    for o in overrides:
        if o.match.lower() in name.lower():
            return Peaks(o.fp32, o.fp16_tensor, f"rubric override for '{o.match}'")
    cc = "{}.{}".format(*(device.cc if len(device.cc) == 2 else (0, 0)))
    rates = per_sm_clock.get(cc)
    if not rates or not device.clock_khz or not device.sms:
        return Peaks(None, None, f"no peak known for compute capability {cc}; add one to rubric.yaml peaks")
    hz_sms = device.clock_khz * 1e3 * device.sms
    return Peaks(rates["fp32"] * hz_sms / 1e12, rates["fp16_tensor"] * hz_sms / 1e12,
                 f"this GPU's own peaks, derived: {device.sms} SMs x {device.clock_khz / 1e6:.2f} GHz x "
                 f"per-SM rate for CC {cc}")
