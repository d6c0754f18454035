"""What `accelerate launch` / torchrun tell this process through its environment: its rank, and the precision the
launcher's config chose. Read before the Accelerator exists (the run-folder lock is taken first).

Precision has one source of truth: the training YAML's `mixed_precision`, which config.yaml records and MFU uses.
An accelerate config (or `--mixed_precision`) that says otherwise is overridden with a warning naming both values.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)

# Where launchers put the global rank: torchrun / accelerate (RANK), Open MPI, MPICH/Intel MPI, MVAPICH.
_RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK")


def launch_rank() -> int:
    """This process's global rank as the launcher set it; 0 when started without a launcher."""
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def mixed_precision_for_run(configured: str) -> str:
    """The precision to train in: `configured` (the training YAML's), with a warning when the launcher said otherwise.

    `accelerate launch` passes its config file's `mixed_precision` (or the flag) as ACCELERATE_MIXED_PRECISION, and an
    explicit `Accelerator(mixed_precision=...)` overrides that silently. The warning names both and says which wins.
    """
    launcher = os.environ.get("ACCELERATE_MIXED_PRECISION")
    if launcher is not None and launcher.lower() != configured.lower() and launch_rank() == 0:
        logger.warning(
            "accelerate launch says mixed_precision=%s (its --config_file or --mixed_precision) but the training "
            "config says mixed_precision=%s; training in %s, the training config's value. To train in %s set "
            "mixed_precision=%s in the training YAML (or on the command line); make the two agree to silence this.",
            launcher, configured, configured, launcher, launcher,
        )
    return configured


def warn_if_bf16_is_emulated(device_type: str, mixed_precision: str) -> bool:
    """Warn (and return True) when bf16 autocast would run on a CPU without bf16 matmul units (no AVX512-BF16/AMX).

    There bf16 matmuls are emulated: measured on an AMD EPYC family 25 model 1 (AVX2 only), 1 thread, the small
    model's training shapes ran at 9-10 GFLOP/s in bf16 against 66-89 in fp32 (benchmarks/results/bf16_threads1.json),
    so a bf16 run is several times slower than fp32 with nothing gained.
    """
    import torch

    if device_type != "cpu" or mixed_precision != "bf16":
        return False
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False
    logger.warning(
        "mixed_precision=bf16 on a CPU without bf16 matmul support (no AVX512-BF16 or AMX): bf16 matmuls are emulated "
        "and run several times slower than fp32 here; set mixed_precision=no to train in fp32."
    )
    return True
