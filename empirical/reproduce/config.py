"""What ``hmmtf reproduce`` runs: a preset of :mod:`empirical.training.presets`, the analysis settings that
go with it, the device, and the two rehearsal switches (``torch.compile`` and bf16 autocast on
the CPU) that make a CPU run take the code paths of the GPU run.

Analysis settings per preset (:data:`ANALYSIS_CONFIGS`; :class:`AnalysisConfig`'s defaults for
the others):

* ``paper``: probe prompts from the first 64 of the 8192 tasks (1024 for training, 16 per task,
  256 for testing): with prompts from all 8192 tasks the 512 default training prompts would name
  about 500 tasks once each and the test prompts would come from tasks the probe never saw (and
  the probe ceilings, Bayes-optimal decoders on the host, would take 128 times longer).
  Recorded passes 16 prompts at a time (a pass stores ``2 L H N^2`` = 35 M floats per prompt). 8
  hand-built prompts (4 to test, 4 to shuffle, 4 to patch): a paper-scale hand-built network
  (p = 16, width 1675) takes 3-5 s to build and run once on one core of the loaded 2-core CPU
  machine and 0.3-0.7 s per further pass, so about half a minute per patched prompt (61 passes).
  Patching, from the same 64 tasks: 512 centroid prompts (the default), 128 patched prompts (the
  trained network's history patching: 1 minute of planned H100 time) and at most 128 of the
  about 2400 state-forcing items they hold (1 minute; uncapped, 18 minutes): the caps that fit
  the stages in a lent GPU's session (``docs/reproduce.md``, "What the caps cut, and why").
* ``paper-mini``: the same code paths at a size 2 CPU cores run in seconds: a 16-way task probe
  (the first 16 of 128 tasks), 64 / 32 probe prompts, 32 shuffled prompts, 4 hand-built prompts,
  previous-token probes up to 3 back (70 probe fits instead of 112 for 5), 64 patched and 256
  centroid prompts, at most 128 of the 169 state-forcing items found (the paper run's capped
  path).
* ``paper-cpu``: the paper's (the same prompt format and 128 states; its mixture is the sparse
  variant, whose cheapest competent network fits a laptop), so that its audit is the paper run's;
  ``paper-cpu-mini``: paper-mini's.

The competence gate (the stage ``ngram-verdict``, run by the presets of :data:`VERDICT_SETTINGS`
only): ``hmmtf ngram-verdict``'s comparison with the in-context n-grams and the variable-order
predictor, at the settings of the committed 128-state verdicts for ``paper-cpu`` (4096 prompts of
8192 fresh HMMs) and at a size that runs in seconds for ``paper-cpu-mini``.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import torch

from empirical.analysis.ngram_verdict import NgramVerdictSettings
from empirical.analysis.report import AnalysisConfig
from empirical.training.presets import ExperimentPreset, get_preset

ANALYZE_SECTIONS = ("shuffle", "probes", "offsets")
"""The sections of ``empirical.analysis`` the ``analyze`` stage runs. The fourth, ``patching``, is
a stage of its own (``patching``, after ``analyze``): at paper scale it takes minutes (the
hand-built network's history patching, about half a minute per prompt on the host), and a run
cut off in it resumes there without redoing the analysis."""

ANALYSIS_CONFIGS: dict[str, AnalysisConfig] = {
    "paper": AnalysisConfig(batch_size=16, probe_train_prompts=1024, probe_test_prompts=256, shuffle_prompts=256,
                            hand_built_prompts=8, probe_tasks=64, centroid_prompts=512, patching_prompts=128,
                            max_forcing_items=128, sections=ANALYZE_SECTIONS),
    "paper-mini": AnalysisConfig(batch_size=32, probe_train_prompts=64, probe_test_prompts=32, shuffle_prompts=32,
                                 hand_built_prompts=4, probe_tasks=16, max_distance=3, centroid_prompts=256,
                                 patching_prompts=64, max_forcing_items=128, sections=ANALYZE_SECTIONS),
}
ANALYSIS_CONFIGS.update({"paper-cpu": ANALYSIS_CONFIGS["paper"], "paper-cpu-mini": ANALYSIS_CONFIGS["paper-mini"]})

VERDICT_SETTINGS: dict[str, NgramVerdictSettings] = {
    "paper-cpu": NgramVerdictSettings(),
    "paper-cpu-mini": NgramVerdictSettings(prompts=64, fresh_tasks=16),
}
"""The settings of the stage ``ngram-verdict`` per preset; the presets not named here do not run it."""


@dataclass(frozen=True)
class ReproduceConfig:
    """One reproduction: ``preset`` (its ``train`` already carrying the rehearsal switches),
    ``analysis``, ``device`` and, for the presets that run the competence gate, ``verdict``."""

    preset: ExperimentPreset
    analysis: AnalysisConfig
    device: torch.device
    verdict: NgramVerdictSettings | None = None

    @property
    def train_dtype(self) -> torch.dtype:
        """The dtype of the training matrix products: bfloat16 under autocast (``bf16`` on CUDA,
        ``bf16-cpu`` anywhere), float32 otherwise."""
        precision = self.preset.train.precision
        autocast = precision == "bf16-cpu" or (precision == "bf16" and self.device.type == "cuda")
        return torch.bfloat16 if autocast else torch.float32

    @property
    def verdict_settings(self) -> NgramVerdictSettings:
        """``verdict``; ``ValueError`` naming the preset when it runs no competence gate."""
        if self.verdict is None:
            raise ValueError(f"preset: {self.preset.name!r} runs no ngram-verdict stage; expected one of "
                             f"{sorted(VERDICT_SETTINGS)}")
        return self.verdict

    def settings(self) -> dict:
        """JSON of everything that determines the outputs: a resumed run must match it (as read
        back from the record: tuples become lists)."""
        return json.loads(json.dumps({
            "preset": self.preset.name,
            "task": self.preset.task(),
            "model": self.preset.model_config(self.preset.mixture_spec.num_tokens).to_dict(),
            "train": self.preset.train.to_dict(),
            "analysis": dataclasses.asdict(self.analysis),
            "device_type": self.device.type,
            **({"ngram_verdict": dataclasses.asdict(self.verdict)} if self.verdict is not None else {}),
        }, allow_nan=False))


def check_device(name: str | None, *, planning_only: bool = False) -> torch.device:
    """``--device``: ``cuda`` (or ``cuda:i``) only where torch sees a GPU (or, ``planning_only``,
    a device this machine need not have), ``cpu``; default CUDA when available or planned.
    ``ValueError`` naming the value and what this torch build offers otherwise."""
    cuda = torch.cuda.is_available() or planning_only
    if name is None:
        return torch.device("cuda" if cuda else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise ValueError(f"--device: {name!r} is not a torch device ({error}); expected 'cuda' or 'cpu'") from error
    if device.type == "cuda" and not cuda:
        raise ValueError(
            f"--device: {name!r}, but torch {torch.__version__} sees no CUDA device here (built with CUDA "
            f"{torch.version.cuda}); expected 'cpu' on this machine, or a machine with a GPU"
        )
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"--device: {name!r}; expected 'cuda' or 'cpu'")
    return device


def reproduce_config(preset_name: str, device_name: str | None, *, compile_model: bool = False,
                     cpu_bf16: bool = False, planning_only: bool = False) -> ReproduceConfig:
    """The reproduction of ``preset_name`` on ``device_name``; ``compile_model`` forces
    ``torch.compile`` and ``cpu_bf16`` bf16 autocast on the CPU (precision ``bf16-cpu``);
    ``planning_only``: a plan for a device this machine need not have (:func:`check_device`)."""
    try:
        preset = get_preset(preset_name)
    except ValueError as error:  # "preset: 'x'; expected one of [...]": name the option
        raise ValueError(f"--{error}") from None
    device = check_device(device_name, planning_only=planning_only)
    train = preset.train
    if compile_model:
        train = dataclasses.replace(train, compile=True)
    if cpu_bf16:
        train = dataclasses.replace(train, precision="bf16-cpu")
    preset = dataclasses.replace(preset, train=train)
    return ReproduceConfig(preset, ANALYSIS_CONFIGS.get(preset.name, AnalysisConfig(sections=ANALYZE_SECTIONS)), device,
                           VERDICT_SETTINGS.get(preset.name))
