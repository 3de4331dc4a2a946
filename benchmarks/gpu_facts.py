"""Read a GPU's MIG facts from the device itself, in the form ``tests/data/gpu-facts/*.json`` holds.

Run on a machine with an NVIDIA GPU (MIG need not be enabled; nothing is changed on the GPU):

    python benchmarks/gpu_facts.py > tests/data/gpu-facts/<model>.json

Sizes come from NVML (``nvmlDeviceGetGpuInstanceProfileInfoV``: memory in MiB, exact) through the optional
``nvidia-ml-py`` package; placements from ``nvidia-smi mig -lgipp``. ``tests/test_catalogue_hardware.py``
checks ``recommender/data/gpus.yaml`` against every reading kept there; entries it backs are marked ``HW``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

PLACEMENT = re.compile(r"Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,\s]*)\}:(\d+)")


def placements(lgipp: str) -> dict[int, dict[str, Any]]:
    """Profile id -> its start memory slices and size in memory slices, from ``nvidia-smi mig -lgipp``."""
    return {int(pid): {"starts": [int(s) for s in starts.split(",") if s.strip()], "mem_slices": int(size)}
            for pid, starts, size in PLACEMENT.findall(lgipp)}


def _smi(*args: str) -> str:
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, check=True, timeout=60).stdout


def read(index: int = 0) -> dict[str, Any]:
    """The reading of GPU ``index``: name, driver, memory and each GPU-instance profile NVML reports."""
    import pynvml as nv  # nvidia-ml-py: only where a GPU is

    nv.nvmlInit()
    try:
        dev = nv.nvmlDeviceGetHandleByIndex(index)
        places = placements(_smi("mig", "-lgipp", "-i", str(index)))
        profiles = []
        for pid in range(32):  # NVML_GPU_INSTANCE_PROFILE_* ids; unsupported ones raise
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfoV(dev, pid)
            except nv.NVMLError:
                continue
            name = info.name.decode() if isinstance(info.name, bytes) else str(info.name)
            profiles.append({"name": name.removeprefix("MIG "), "id": info.id, "instances": info.instanceCount,
                             "memory_mib": info.memorySizeMB, "sms": info.multiprocessorCount,
                             "compute_slices": info.sliceCount, **places.get(info.id, {})})
        name = nv.nvmlDeviceGetName(dev)
        return {"name": name.decode() if isinstance(name, bytes) else name,
                "driver": nv.nvmlSystemGetDriverVersion(),
                "memory_mib": nv.nvmlDeviceGetMemoryInfo(dev).total // 2**20,
                "profiles": sorted(profiles, key=lambda p: (p.get("mem_slices", 0), p["name"]))}
    finally:
        nv.nvmlShutdown()


if __name__ == "__main__":
    try:
        print(json.dumps(read(int(sys.argv[1]) if len(sys.argv) > 1 else 0), indent=1))
    except (ImportError, OSError, subprocess.SubprocessError) as exc:
        sys.exit(f"error: no GPU reading here: {exc}")
