"""Every result JSON under ``figures/``: the command that makes it and the code that computes it.

``producers`` are git pathspecs (directories, files; a leading ``!`` excludes) of the modules whose
change can change the numbers: the computation, not the plotting and not the whole repository. A
result is stale when one of them differs between the commit recorded in the JSON and the working
tree (:mod:`ledger.provenance`). ``needs`` says what the command needs besides the code (a
trained checkpoint, a long run), so that a list of stale results says which are cheap to redo.

To register a new result: add a :class:`Result` to :data:`RESULTS` (``hmmtf ledger --check`` lists
every JSON under ``figures/`` that is not registered), then give the claims that read it their
``sources`` (:mod:`ledger.registry`).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Result:
    """One result JSON, or a family of them. ``path``: from the repository root; with ``*`` a
    pattern (``fnmatch``: ``figures/ladder/*/analysis.json``) that any number of files may match,
    else a file that must exist; ``command``: what makes it (None: no command can, ``needs`` says
    why), naming its output folder under figures/ (every command's default output is a run folder
    outside the tracked results, so only an explicit ``--out`` rewrites a committed result);
    ``producers``: pathspecs of the code that computes it; ``needs``: what else the command needs;
    ``canary``: the :data:`ledger.canaries.CANARIES` entry that can vouch for it when its producers
    change (None: none can); ``timing``: a measurement of a machine (a benchmark's rates), which no
    canary can vouch for and no change of code makes wrong, only older: the ledger tells it with the
    commit and machine it was measured on and how far its producers have moved since, and does not
    count it a problem (docs/ledger.md, "Timings")."""

    path: str
    command: str | None
    producers: tuple[str, ...]
    needs: str = ""
    canary: str | None = None
    timing: bool = False

    @property
    def is_pattern(self) -> bool:
        return "*" in self.path


    def files(self, root: Path) -> list[str]:
        """The files this result names under ``root``: its path, or every match of its pattern."""
        if not self.is_pattern:
            return [self.path]
        return sorted(path.relative_to(root).as_posix() for path in (root / "figures").rglob("*.json")
                      if fnmatch.fnmatchcase(path.relative_to(root).as_posix(), self.path))

    def remedy(self) -> str:
        """What to run to make this result again, and what that needs."""
        if self.command is None:
            return f"no command makes it: {self.needs}"
        return f"run `{self.command}`" + (f" (needs {self.needs})" if self.needs else "")


HMM_ENGINE = ("hmm/model.py", "hmm/filtering.py", "hmm/prompts.py", "hmm/generators.py")
"""The HMM engine under every result: the HMM type, exact filtering, sampling, random HMMs."""
MIXTURE = (*HMM_ENGINE, "hmm/bayes.py", "hmm/presets.py", "empirical/training/presets.py", "empirical/training/data.py")
"""A preset's mixture, its prompts and the Bayes-optimal predictor."""
CONSTRUCTION = ("construction/", "!construction/export.py", "!construction/commands.py")
"""The hand-built network (its export does not compute anything a result reads). Its command module
lived here until it moved into the command line (``hmmtf/commands/construction_info.py``); the
ledger follows a move from either side, so the old path stays excluded."""
ROFORMER = ("empirical/training/model.py",)
"""The trained network's forward pass."""
TRAINING_BENCHMARK = ("benchmarks/bench_training.py", "empirical/measurement/throughput.py", "empirical/training/train.py",
                      "empirical/measurement/roofline.py", "empirical/training/allocator.py", *ROFORMER)
"""The training benchmark: its timed step and its ways of using the cores, the training step's
gradient code, the matmul peak, the malloc tunables of the tuned ways and the network."""
MARKOV = ("empirical/studies/markov/chains.py", "empirical/studies/markov/runs.py", "empirical/studies/markov/criterion.py",
          "empirical/studies/markov/inits.py", "empirical/studies/markov/config.py", "empirical/studies/markov/attention.py",
          "empirical/training/configs.py", "hmm/model.py", "hmm/prompts.py")
"""The Markov-chain study's own computation: chains, one run, the trap criterion, the
initialisations, the sweep's config, the attention scores. Not listed, each guarded by a test
instead: the aggregation into the stored cells and sides (tests/test_markov_sweep.py recomputes
them from the stored runs with the current code), the RoFormer and the training loop, which every
study shares (the same file replays a committed trapped run and requires the same outcome), and
the command and figure modules, which write and draw what those computed."""
TORCH_SMC = ("benchmarks/bench_prior_predictive.py", "hmm/prior_predictive_torch.py", "hmm/prior_predictive.py",
             "hmm/particle_filter.py", "hmm/markov.py", "empirical/yardsticks/competence.py", "empirical/yardsticks/regime.py",
             *MIXTURE)
"""The torch SMC's runs on the lent GPU (issue 46): the bench, the torch SMC and what it shares with
the numpy one (the prior, the settings, the result type), and the competence result's prompts."""
GPU_SWEEP = ("empirical/training/train.py", "empirical/training/checkpoint.py", "empirical/analysis/ngram_verdict.py",
             "empirical/yardsticks/competence.py", "empirical/yardsticks/ngram.py", "empirical/yardsticks/regime.py", *ROFORMER,
             *MIXTURE)
"""The recipe sweep (issue 47): each run's training and its ``hmmtf ngram-verdict``. Not listed,
guarded by tests/test_gpu_recipe_sweep.py instead: the sweep script, which turns a recipe into the
``hmmtf train`` flags (the test checks that every recipe keeps the budget of prompts) and collects
what the two commands wrote."""
HEAD_MODULES = ("empirical/analysis/heads.py", "empirical/analysis/head_figures.py",
                "hmmtf/commands/heads.py")
"""``hmmtf heads``, which ``hmmtf analyze`` does not run."""
KLMAP_MODULES = ("empirical/analysis/klmap.py", "empirical/analysis/klmap_figures.py",
                 "hmmtf/commands/klmap.py")
"""``hmmtf klmap``, which ``hmmtf analyze`` does not run either."""
BELIEF_MODULES = ("empirical/analysis/beliefs.py", "empirical/analysis/belief_figures.py",
                  "hmmtf/commands/beliefs.py")
"""``hmmtf beliefs``, which ``hmmtf analyze`` does not run either."""
MOVED_ANALYSIS_COMMANDS = ("empirical/analysis/commands.py", "empirical/analysis/head_commands.py",
                           "empirical/analysis/klmap_commands.py", "empirical/analysis/belief_commands.py")
"""Where the analysis commands lived before they moved into ``hmmtf/commands/``: the ledger follows a
move from either side, so a folder that held them excludes their old paths."""
ANALYSIS = ("empirical/analysis/", "!empirical/analysis/figures.py", "!empirical/analysis/patching_figures.py",
            "!empirical/analysis/report_figures.py", "!empirical/analysis/ngram_verdict.py",
            *(f"!{module}" for module in (*HEAD_MODULES, *KLMAP_MODULES, *BELIEF_MODULES, *MOVED_ANALYSIS_COMMANDS)),
            *ROFORMER, *MIXTURE, *CONSTRUCTION, "empirical/training/configs.py")
"""``hmmtf analyze``: every section, the networks it reads and the mixture its prompts come from. Not
its command module (``hmmtf/commands/analyze.py``), which parses the options into the sections'
config (``AnalysisConfig``, in ``report.py``) and writes what they computed, nor its figures, as the
Markov study's are not listed either."""
FRESH_HMM_REFERENCES = ("empirical/yardsticks/curves.py", "empirical/yardsticks/competence.py", "empirical/yardsticks/ngram.py", "empirical/yardsticks/variable_order.py",
                        "hmm/prior_predictive.py", "hmm/particle_filter.py", "hmm/markov.py", "empirical/yardsticks/evaluate.py", "empirical/yardsticks/regime.py",
                        "hmm/families.py", *ROFORMER, *MIXTURE)
"""What the one-checkpoint commands (``hmmtf heads``, ``klmap``, ``beliefs``) share: the fresh-HMM
prompts of ``hmmtf curve``'s probe, the model's predictions and the in-context references (the
n-grams, the ceiling, the oracle)."""
PLATEAU_STUDY = ("empirical/studies/plateau.py", "empirical/yardsticks/curves.py", "models/plateau/",
                 "!models/plateau/*/checkpoint/*.safetensors", "models/paper-scale-cpu/paper-2x4x64-4x/",
                 "!models/paper-scale-cpu/paper-2x4x64-4x/checkpoint/*.safetensors", "models/paper-scale-cpu/sparse-2x4x64-1x/",
                 "!models/paper-scale-cpu/sparse-2x4x64-1x/checkpoint/*.safetensors", "figures/plateau/verdicts/",
                 "figures/paper-scale/cpu/paper-2x4x64-4x/ngram-verdict.json",
                 "figures/paper-scale/cpu/sparse-2x4x64-1x/ngram-verdict.json",
                 "figures/competence/ceiling-paper.json")
"""``hmmtf plateau``: like ``hmmtf curves`` (:data:`CURVE_STUDY`), summaries of the runs' recorded
curves, so its producers are the summarising code and the run folders, the plain recipe's included,
and the runs' final verdicts and the bound on the paper family's ceiling that it quotes."""
CURVE_STUDY = ("empirical/yardsticks/curves.py", "models/curves/", "!models/curves/*/checkpoint/*.safetensors")
"""``hmmtf curves``: it computes nothing but summaries of recorded data, each run folder's curve
points and baselines (``curve.jsonl``, ``curve_baselines.json``), which ``hmmtf curve`` measured
while the run trained, with the code of that time and the probe settings each run records. So
its producers are the summarising code and the run folders: rerunning it after a change to the
model, the n-grams or the SMC would rewrite the same numbers, and calling the result fresh then
would claim a recomputation that did not happen. What a run's recorded numbers were measured
with is in its ``curve_baselines.json`` (the probe and the ceiling's SMC settings). Not the run
folders' tensors, which it does not read (they left the tree: ``hmmtf restore-checkpoint``)."""
COMPETENCE = ("empirical/yardsticks/competence.py", "empirical/yardsticks/ngram.py", "empirical/yardsticks/variable_order.py", "hmm/prior_predictive.py",
              "hmm/particle_filter.py", "hmm/markov.py", "empirical/yardsticks/evaluate.py", "empirical/yardsticks/regime.py",
              "empirical/yardsticks/hand_built.py", *ROFORMER, *MIXTURE, *CONSTRUCTION)
"""``hmmtf evaluate``'s ``competence.json``: the ladder on fresh HMMs (the n-grams, the model, the
hand-built network, the ceiling's SMC, the oracle)."""
DEPTH_LADDER_RUNS = ("sparse-4x4x64-2x", "sparse-8x4x64-2x", "paper-4x4x64-4x-curriculum")
"""The depth ladder's runs with results (``models/paper-scale-cpu/RUN``, issue 65): 4 x 4 x 64 and
8 x 4 x 64 on ``paper-sparse`` at twice the paper's budget, 4 x 4 x 64 on ``paper`` at four times it
(the plateau study's data curriculum)."""
DEPTH_POINTS = tuple(f"figures/paper-scale/cpu/{run}"
                     for run in ("sparse-2x4x64-2x", "paper-2x4x64-4x", *DEPTH_LADDER_RUNS))
"""The networks ``hmmtf depth`` compares: the depth ladder's and the 2-layer networks of the same
recipes (docs/empirical.md, "The depth ladder at 128 states"; the study sorts them by family and
depth)."""
PAPER_SCALE_EVALUATE = (
    "hmmtf evaluate models/paper-scale-cpu/POINT --out figures/paper-scale/cpu/POINT --num-prompts 64 "
    "--hand-built-prompts 0 --fresh-tasks 1024 --reference-tasks 4096 --competence-prompts 256 --ceiling-backend "
    "collapsed --ceiling-particles 128 --threads 1 (64 prompts for the evaluation, as the Bayes predictor over 8192 "
    "HMMs of 128 states costs 3 to 10 s a prompt on a core; the competence result on 256 others, with the "
    "collapsed SMC's upper bound as its ceiling; POINT: sparse-2x4x64-2x, paper-2x4x64-4x and the depth ladder's "
    "sparse-4x4x64-2x, paper-4x4x64-4x-curriculum, sparse-8x4x64-2x)")
"""The evaluation of the 128-state networks, with the competence result beside the ceiling's bound."""
EVALUATE = ("empirical/yardsticks/evaluate.py", "empirical/yardsticks/regime.py", "hmm/families.py", *ROFORMER, *MIXTURE)
"""``hmmtf evaluate``'s ``evaluation.json`` with its regime section: the model, the training mixture's
Bayes predictor, the oracle and the fresh HMMs."""
NGRAM_VERDICT = ("empirical/analysis/ngram_verdict.py", "empirical/yardsticks/competence.py", "empirical/yardsticks/ngram.py", "empirical/yardsticks/variable_order.py", "empirical/yardsticks/evaluate.py",
                 "empirical/yardsticks/regime.py", "empirical/yardsticks/hand_built.py", "hmm/memory.py", "hmm/families.py", *ROFORMER,
                 *MIXTURE)
"""``hmmtf ngram-verdict``: its prompts, the model's predictions, the in-context n-grams (fitted as
the competence result fits them) and the oracle."""
HEADS = ("empirical/analysis/heads.py", "empirical/analysis/offsets.py", "empirical/analysis/networks.py",
         *FRESH_HMM_REFERENCES)
"""``hmmtf heads``: the head scores, the mean-ablation and the in-context references it compares with."""
KLMAP = ("empirical/analysis/klmap.py", "empirical/analysis/heads.py", "empirical/yardsticks/hand_built.py", *CONSTRUCTION,
         "hmm/memory.py", *FRESH_HMM_REFERENCES)
"""``hmmtf klmap``: the map, its predictors (the model, the hand-built network, ``P_L``, the in-context
n-grams, the ceiling, the oracle) and the per-prompt KL of ``hmmtf heads`` (``heads.py``)."""
BELIEFS = ("empirical/analysis/beliefs.py", "empirical/analysis/networks.py", "empirical/analysis/probes.py",
           "empirical/analysis/shuffle.py", "empirical/analysis/report.py", "empirical/yardsticks/hand_built.py",
           "empirical/training/configs.py", *FRESH_HMM_REFERENCES)
"""``hmmtf beliefs``: the probes (their streams, standardisation, bootstrap, derangements and random-init twin from
the modules of ``hmmtf analyze``), the beliefs (exact filtering, in :data:`MIXTURE`, per segment of
``empirical/yardsticks/hand_built.py``) and the in-context references."""

CPU_SMALL_CHECKPOINT = ("runs/cpu-small/checkpoint, from `torchrun --standalone --nproc_per_node=2 -m hmmtf train "
                        "--preset cpu-small --threads 1 --run-dir runs/cpu-small` (about 7 minutes on 2 cores)")

REGIME_CHECKPOINT = ("runs/tasks-8192-deep/checkpoint, from `hmmtf train --preset tasks-8192-deep --threads 1` "
                     "(about 20-45 minutes on a core)")

REGIME_MODEL_FAMILIES = ("observable", "paper")
"""The data families of the shipped regime models: ``models/FAMILY-SHAPE``, results in ``figures/FAMILY/SHAPE``."""


def regime_model_results(family: str) -> tuple[Result, ...]:
    """The results of the shipped regime models of ``family``: ``hmmtf evaluate`` (the regime
    diagnostic and the competence result), ``hmmtf analyze`` (every section), ``hmmtf heads``,
    ``hmmtf ngram-verdict`` and ``hmmtf klmap``."""
    folder, model = f"figures/{family}/*", f"models/{family}-POINT"
    evaluate = (f"hmmtf evaluate {model} --out figures/{family}/POINT --hand-built-prompts 0 --num-prompts 512 "
                f"--reference-tasks 4096 --threads 1 (the command is in the JSON)")
    needs = f"the model's checkpoint ({model})"
    return (
        Result(f"{folder}/evaluation.json", evaluate,
               EVALUATE, needs=needs,
               canary="evaluate"),
        Result(f"{folder}/competence.json", evaluate, (*COMPETENCE, "hmm/families.py"),
               needs=needs + "; 10 (observable) to 40 (paper) minutes on a core", canary="evaluate"),
        Result(f"{folder}/analysis.json", f"hmmtf analyze {model} --out figures/{family}/POINT --sections shuffle "
               f"probes offsets patching --probe-tasks 64 --threads 1", (*ANALYSIS, "hmm/families.py"),
               needs=needs + "; about 10 minutes on a core", canary="analyze"),
        Result(f"{folder}/beliefs.json", f"hmmtf beliefs {model} --out figures/{family}/POINT --threads 1", BELIEFS,
               needs=needs + "; a few minutes on a core (the ceiling's SMC is most of it)", canary="beliefs"),
        Result(f"{folder}/heads.json", f"hmmtf heads {model} --out figures/{family}/POINT --threads 1", HEADS,
               needs=needs + "; a few minutes on a core (the ceiling's SMC is most of it)", canary="heads"),
        Result(f"{folder}/ngram-verdict.json", f"hmmtf ngram-verdict {model} --out figures/{family}/POINT --threads 1",
               NGRAM_VERDICT, needs=needs + "; under a minute on a core", canary="ngram-verdict"),
        Result(f"{folder}/klmap.json", f"hmmtf klmap {model} --out figures/{family}/POINT --threads 1", KLMAP,
               needs=needs + "; about 15 (observable) to 35 (paper) minutes on a core (the hand-built network, 256 "
                             "prompts x 3 history lengths, and the ceiling's SMC)", canary="klmap"),
    )


RESULTS: tuple[Result, ...] = (
    Result("figures/verification/report.json", "hmmtf main --out figures/verification",
           ("bounds/", "!bounds/figures.py", *CONSTRUCTION, *HMM_ENGINE, "hmm/memory.py", "hmm/observability.py",
            "hmm/undercomplete.py", "hmm/presets.py"),
           needs="about 1 minute on 2 cores", canary="verification"),
    Result("figures/calibration/cpu-small.json", "hmmtf calibrate --preset cpu-small --out figures/calibration",
           ("empirical/yardsticks/calibrate.py", "empirical/yardsticks/evaluate.py", *MIXTURE), needs="seconds", canary="calibrate"),
    Result("figures/cpu-small/evaluation.json", "hmmtf evaluate runs/cpu-small/checkpoint --out figures/cpu-small",
           ("empirical/yardsticks/evaluate.py", *ROFORMER, *MIXTURE), needs=CPU_SMALL_CHECKPOINT, canary="evaluate"),
    Result("figures/cpu-small/hand_built.json", "hmmtf evaluate runs/cpu-small/checkpoint --out figures/cpu-small",
           ("empirical/yardsticks/hand_built.py", "empirical/yardsticks/evaluate.py", *ROFORMER, *MIXTURE,
            *CONSTRUCTION, "hmm/memory.py"), needs=CPU_SMALL_CHECKPOINT, canary="evaluate"),
    Result("figures/cpu-small/benchmark_threads1.json",
           "python benchmarks/bench_training.py --preset cpu-small --threads 1 --steps 30 --out figures/cpu-small/benchmark_threads1.json",
           TRAINING_BENCHMARK, needs="idle cores (a timing)", timing=True),
    Result("figures/cpu-small/benchmark_threads2.json",
           "python benchmarks/bench_training.py --preset cpu-small --threads 2 --steps 30 --out figures/cpu-small/benchmark_threads2.json",
           TRAINING_BENCHMARK, needs="idle cores (a timing)", timing=True),
    Result("figures/benchmarks/training_compare.json",
           "python benchmarks/bench_training.py --compare --preset tasks-8192-small --compile --steps 50 --warmup 5 "
           "--rounds 6 --out figures/benchmarks/training_compare.json",
           TRAINING_BENCHMARK, needs="idle cores (a timing); about 4 minutes a round on 2 cores, 6 rounds", timing=True),
    Result("figures/benchmarks/training_target.json",
           "python benchmarks/bench_training.py --compare --preset tasks-8192-small --steps 50 --warmup 5 --rounds 16 "
           "--ways independent-2x1-tuned-malloc --out figures/benchmarks/training_target.json",
           TRAINING_BENCHMARK, needs="idle cores (a timing); about 40 s a round on 2 cores, 16 rounds", timing=True),
    Result("figures/benchmarks/rotary.json",
           "python benchmarks/bench_rotary.py --preset tasks-8192-small --rounds 8 --out figures/benchmarks/rotary.json",
           ("benchmarks/bench_rotary.py", "empirical/measurement/throughput.py", "empirical/training/train.py", *ROFORMER),
           needs="idle cores (a timing); about 3 minutes", timing=True),
    Result("figures/benchmarks/malloc.json", "python benchmarks/bench_malloc.py --pairs 4 --out figures/benchmarks/malloc.json",
           ("benchmarks/bench_malloc.py", "empirical/training/allocator.py", "empirical/measurement/throughput.py", "empirical/training/train.py",
            *ROFORMER), needs="idle cores (a timing); about 2 minutes", timing=True),
    Result("figures/analysis/analysis.json", "hmmtf analyze runs/cpu-small/checkpoint --out figures/analysis",
           ANALYSIS, needs=CPU_SMALL_CHECKPOINT + "; about 6 minutes", canary="analyze"),
    Result("figures/patching/analysis.json",
           "hmmtf analyze runs/cpu-small/checkpoint --out figures/patching --sections patching",
           ANALYSIS, needs=CPU_SMALL_CHECKPOINT + "; about 2-4 minutes", canary="analyze"),
    Result("figures/markov/results.json", "hmmtf markov-sweep --out figures/markov --no-progress", MARKOV,
           needs="about 30 minutes on 2 cores", canary="markov-sweep"),
    Result("figures/markov/long-budget/results.json",
           "hmmtf markov-sweep --out figures/markov/long-budget --p-values 0.5 0.9 --q-values 0.5 0.9 --architectures "
           "1-layer-tied 2-layer-tied --inits gaussian lowrank --seeds 8 --steps 2000 --no-progress",
           MARKOV, needs="about 28 minutes on 2 cores", canary="markov-sweep"),
    *(Result(f"figures/markov/init-std-{std}/results.json",
             f"hmmtf markov-sweep --out figures/markov/init-std-{std} --init-std {std} --p-values 0.5 0.9 --q-values 0.9 "
             f"--architectures 1-layer-tied{inits} --seeds 8 --no-progress",
             MARKOV, needs=needs, canary="markov-sweep")
      for std, inits, needs in (("0.002", "", "about 27 minutes on 2 loaded cores (the three initialisations)"),
                                ("0.2", " --inits gaussian", "about 9 minutes on 2 loaded cores"),
                                ("1.0", " --inits gaussian", "about 9 minutes on 2 loaded cores"))),
    Result("figures/markov/incontext/results.json",
           "hmmtf markov-incontext --out figures/markov/incontext --runs models/markov-incontext --workers 1",
           ("empirical/studies/markov/incontext.py", "empirical/analysis/heads.py", "empirical/analysis/offsets.py",
            "empirical/analysis/networks.py", "empirical/analysis/report.py", "empirical/yardsticks/ngram.py",
            "empirical/yardsticks/competence.py", "empirical/yardsticks/evaluate.py", "empirical/training/train.py", "empirical/training/data.py",
            "hmm/model.py", "hmm/prompts.py", *ROFORMER),
           needs="the committed runs in models/markov-incontext (else about 35 minutes of a core to train them)",
           canary="markov-incontext"),
    Result("figures/benchmarks/hmm.json", "python benchmarks/bench_hmm.py --json figures/benchmarks/hmm.json",
           ("benchmarks/bench_hmm.py", "empirical/measurement/roofline.py", "hmm/particle_filter.py", *MIXTURE),
           needs="`make bench` (the bench extra: hmmlearn, jax, dynamax) and idle cores (a timing)", timing=True),
    Result("figures/benchmarks/hand_built.json",
           "python benchmarks/bench_hand_built.py --preset cpu-small --prompts 1024 --L 3 --T 10 --out figures/benchmarks/hand_built.json",
           ("benchmarks/bench_hand_built.py", "empirical/yardsticks/hand_built.py", *CONSTRUCTION, *MIXTURE),
           needs="idle cores (a timing)", timing=True),
    Result("figures/ladder/*/evaluation.json",
           "hmmtf evaluate runs/POINT/checkpoint --out figures/ladder/POINT (the point's command is in the JSON)",
           ("empirical/yardsticks/evaluate.py", "empirical/yardsticks/regime.py", *ROFORMER, *MIXTURE),
           needs="the point's checkpoint: models/POINT copied to runs/POINT/checkpoint, and beside it "
                 "figures/ladder/POINT/metrics.jsonl and the evaluation.json's train_summary as train_summary.json "
                 "(or hmmtf train --preset POINT)", canary="evaluate"),
    Result("figures/ladder/*/competence.json",
           "hmmtf evaluate runs/POINT/checkpoint --out figures/ladder/POINT (the point's command is in the JSON)",
           COMPETENCE, needs="the point's checkpoint (as for evaluation.json); the SMC ceiling takes 11-40 "
                                  "minutes on a core", canary="evaluate"),
    Result("figures/competence/prior_predictive.json",
           "python benchmarks/bench_prior_predictive.py --preset tasks-8192-deep --prompts 32 --out "
           "figures/competence/prior_predictive.json",
           ("benchmarks/bench_prior_predictive.py", "hmm/prior_predictive.py", "hmm/particle_filter.py", "hmm/bidirectional.py", "hmm/markov.py",
            "empirical/yardsticks/competence.py", "empirical/yardsticks/regime.py", *MIXTURE),
           needs="about 30 minutes on a core (a timing: idle cores)", canary="prior-predictive"),
    *(Result(f"figures/competence/torch-smc/{name}.json",
             "bash benchmarks/gpu_session.sh start; bash benchmarks/gpu_session.sh follow 535 at commit f5ba2ef "
             "(on a lent GPU, docs/reproduce.md: its SMC steps, which the script has left since)", TORCH_SMC, needs="a lent GPU (about 3 minutes)", canary="torch-smc")
      for name in ("s16_cuda_float64", "s16_cuda_float32", "s128_cuda_float32")),
    Result("figures/competence/torch-smc/s16_cpu_numpy.json",
           "python benchmarks/bench_prior_predictive.py --preset tasks-8192-deep --prompts 8 --batch-prompts 8 "
           "--chains 0 --no-convergence --out figures/competence/torch-smc/s16_cpu_numpy.json",
           ("benchmarks/bench_prior_predictive.py", "hmm/prior_predictive.py", "hmm/particle_filter.py", "hmm/markov.py",
            "empirical/yardsticks/competence.py", "empirical/yardsticks/regime.py", *MIXTURE),
           needs="about 1 minute on a core", canary="prior-predictive"),
    *(Result(f"figures/benchmarks/collapsed-smc/{name}.json", command,
             ("benchmarks/bench_collapsed_smc.py", "benchmarks/bench_prior_predictive.py", "hmm/collapsed_smc.py",
              "hmm/prior_predictive.py", "hmm/particle_filter.py", "hmm/markov.py", "hmm/generators.py",
              "empirical/yardsticks/competence.py", "empirical/yardsticks/regime.py", *MIXTURE),
             needs=needs + " (its rates are timings: idle cores)", timing=True)
      for name, command, needs in (
          ("s128", "python benchmarks/bench_collapsed_smc.py --preset paper --prompts 32 --replicates 2 --particles 128 "
                   "--burn-in-steps 32 --no-parameter-smc --doubling --out figures/benchmarks/collapsed-smc/s128.json",
           "about 3 minutes on a core"),
          ("s16", "python benchmarks/bench_collapsed_smc.py --preset tasks-8192-deep --prompts 16 --replicates 3 "
                  "--out figures/benchmarks/collapsed-smc/s16.json", "about 5 minutes on a core"),
          ("s128-parameter", "python benchmarks/bench_collapsed_smc.py --preset paper --prompts 4 --replicates 2 "
                             "--particles 128 --burn-in-steps 8 --parameter-particles 64 --moves 1 "
                             "--out figures/benchmarks/collapsed-smc/s128-parameter.json", "about 7 minutes on a core"))),
    *(Result(f"figures/competence/ceiling-{family}.json",
             f"python benchmarks/ceiling_bounds.py --preset paper{mixture} --prompts 256 --replicates {replicates} "
             f"--particles 128 --burn-in-steps 8 --work runs/ceiling-bounds/{family}{models} --out "
             f"figures/competence/ceiling-{family}.json (first with --shard 0/2 and --shard 1/2, one "
             f"process a core; the last call gathers the replicates)",
             ("benchmarks/ceiling_bounds.py", "hmm/collapsed_smc.py", "hmm/prior_predictive.py", "hmm/generators.py",
              "hmm/markov.py", "empirical/yardsticks/competence.py", "empirical/yardsticks/ngram.py",
              "empirical/yardsticks/evaluate.py", "empirical/yardsticks/regime.py", "empirical/yardsticks/hand_built.py",
              "hmm/memory.py", *ROFORMER, *MIXTURE, *extra),
             needs=f"about {minutes} minutes of CPU (two cores: half that)", canary="ceiling-bounds")
      for family, mixture, replicates, models, extra, minutes in (
          ("paper", "", 32, " --models models/paper-scale-cpu/paper-2x4x64-4x models/paper-scale-cpu/paper-2x4x64-3x "
                            "models/paper-scale-small/2x4x64",
           ("models/paper-scale-cpu/paper-2x4x64-4x/checkpoint/", "models/paper-scale-cpu/paper-2x4x64-3x/checkpoint/",
            "models/paper-scale-small/2x4x64/checkpoint/", "empirical/plotting.py", "empirical/analysis/ngram_verdict.py"),
           50),
          ("paper-dirichlet-0.1", " --mixture paper-dirichlet-0.1", 16, "", ("empirical/plotting.py",
                                                                              "empirical/analysis/ngram_verdict.py"), 20),
          ("paper-sparse", " --mixture paper-sparse", 32, " --models models/paper-scale-cpu/sparse-2x4x64-2x "
                                                          "models/paper-scale-cpu/sparse-4x4x64-2x",
           ("models/paper-scale-cpu/sparse-2x4x64-2x/checkpoint/", "models/paper-scale-cpu/sparse-4x4x64-2x/checkpoint/",
            "empirical/plotting.py", "empirical/analysis/ngram_verdict.py"), 70))),
    *(Result(f"figures/competence/ceiling-lower-{name}.json",
             f"python benchmarks/ceiling_lower_bounds.py {arguments} --work runs/ceiling-lower/{name} (once per setting "
             f"and --count, see docs/hmm.md), then the same with --gather{gather} --out "
             f"figures/competence/ceiling-lower-{name}.json",
             ("benchmarks/ceiling_lower_bounds.py", "benchmarks/ceiling_bounds.py", "hmm/bidirectional.py",
              "hmm/prior_predictive.py", "hmm/particle_filter.py", "hmm/markov.py", "hmm/generators.py",
              "empirical/yardsticks/competence.py", "empirical/yardsticks/ngram.py", "empirical/yardsticks/evaluate.py",
              "empirical/yardsticks/regime.py", "empirical/yardsticks/hand_built.py", "hmm/memory.py",
              "empirical/plotting.py", "empirical/analysis/ngram_verdict.py", *ROFORMER, *MIXTURE, *models),
             needs=needs)
      for name, arguments, gather, models, needs in (
          ("paper", "--preset paper", " --upper figures/competence/ceiling-paper.json --models "
           "models/paper-scale-cpu/paper-2x4x64-4x models/paper-scale-cpu/paper-2x4x64-3x "
           "models/paper-scale-cpu/paper-4x4x64-4x-curriculum",
           ("models/paper-scale-cpu/paper-2x4x64-4x/checkpoint/", "models/paper-scale-cpu/paper-2x4x64-3x/checkpoint/",
            "models/paper-scale-cpu/paper-4x4x64-4x-curriculum/checkpoint/", "figures/competence/ceiling-paper.json"),
           "about 12 minutes of CPU"),
          ("paper-sparse", "--preset paper --mixture paper-sparse", " --upper figures/competence/ceiling-paper-sparse.json "
           "--models models/paper-scale-cpu/sparse-2x4x64-2x models/paper-scale-cpu/sparse-4x4x64-2x "
           "models/paper-scale-cpu/sparse-8x4x64-2x",
           ("models/paper-scale-cpu/sparse-2x4x64-2x/checkpoint/", "models/paper-scale-cpu/sparse-4x4x64-2x/checkpoint/",
            "models/paper-scale-cpu/sparse-8x4x64-2x/checkpoint/", "figures/competence/ceiling-paper-sparse.json"),
           "about 6 minutes of CPU, and the networks' weights (hmmtf restore-checkpoint "
           "models/paper-scale-cpu/POINT/checkpoint --weights-only)"),
          ("s16", "--preset tasks-8192-deep --count 32 --chains 4", " --smc-particles 256 --smc-replicates 2", (),
           "about 6 minutes of CPU"),
          ("paper-settings", "--preset paper --count 32 --chains C --substeps K (C, K: 1, 1; 4, 1; 1, 4; 16, 1; and "
           "16, 8 stopped after 9 prompts)", " --upper figures/competence/ceiling-paper.json --models "
           "models/paper-scale-cpu/paper-2x4x64-4x models/paper-scale-cpu/paper-4x4x64-4x-curriculum",
           ("models/paper-scale-cpu/paper-2x4x64-4x/checkpoint/",
            "models/paper-scale-cpu/paper-4x4x64-4x-curriculum/checkpoint/", "figures/competence/ceiling-paper.json"),
           "about 25 CPU minutes for the first four settings, 50 CPU seconds a prompt for C = 16, K = 8"))),
    Result("figures/paper-scale/sweep/sweep.json",
           "bash benchmarks/gpu_session.sh start; bash benchmarks/gpu_session.sh follow 535 at commit f5ba2ef "
           "(on a lent GPU, docs/reproduce.md; then the sweep's files into figures/paper-scale/sweep)", GPU_SWEEP,
           needs="a lent GPU (about 7 minutes of an H200 for two runs)", canary="ngram-verdict"),
    Result("figures/paper-scale/small/*/ngram-verdict.json",
           "hmmtf ngram-verdict models/paper-scale-small/POINT --out figures/paper-scale/small/POINT --prompts 1024 "
           "--fresh-tasks 1024 --threads 1 (POINT: 2x4x64, 4x4x64; the models' commands are in models/README.md)",
           NGRAM_VERDICT, needs="the point's run folder, models/paper-scale-small/POINT; about a minute on a core",
           canary="ngram-verdict"),
    Result("figures/paper-scale/cpu/*/ngram-verdict.json",
           "hmmtf ngram-verdict models/paper-scale-cpu/POINT --out figures/paper-scale/cpu/POINT --threads 1 (POINT: "
           "sparse-2x4x64-1x, sparse-2x4x64-2x, paper-2x4x64-3x, paper-2x4x64-4x, sparse-4x4x64-2x, "
           "paper-4x4x64-4x-curriculum, sparse-8x4x64-2x; the runs' hmmtf "
           "curve commands are in models/README.md)",
           NGRAM_VERDICT, needs="the point's weights (hmmtf restore-checkpoint models/paper-scale-cpu/POINT/checkpoint "
                                "--weights-only); about 10 minutes and 6 GB on a core",
           canary="ngram-verdict"),
    Result("figures/paper-scale/cpu/*/evaluation.json", PAPER_SCALE_EVALUATE, EVALUATE,
           needs="the point's run folder, models/paper-scale-cpu/POINT; about 30 minutes on a core", canary="evaluate"),
    Result("figures/paper-scale/cpu/*/competence.json", PAPER_SCALE_EVALUATE, (*COMPETENCE, "hmm/collapsed_smc.py"),
           needs="the point's run folder, models/paper-scale-cpu/POINT; with the evaluation, about 40 minutes on a core",
           canary="competence-bound"),
    Result("figures/paper-scale/cpu/*/analysis.json",
           "hmmtf analyze models/paper-scale-cpu/POINT --out figures/paper-scale/cpu/POINT --sections shuffle probes "
           "offsets patching --batch-size 16 --probe-train-prompts 1024 --probe-test-prompts 256 --shuffle-prompts 256 "
           "--hand-built-prompts 8 --max-distance 5 --max-offset 8 --seed 0 --centroid-prompts 512 --patching-prompts "
           "128 --max-forcing-items 128 --state-threshold 0.9 --probe-tasks 64 --threads 1 (the paper preset's analysis "
           "settings, `python benchmarks/gpu_recipe_sweep.py --preset paper --analysis-flags`; POINT: sparse-2x4x64-2x, "
           "paper-2x4x64-4x and the depth ladder's networks)",
           (*ANALYSIS, "hmm/families.py"), needs="the point's run folder, models/paper-scale-cpu/POINT; about 15 "
                                                   "minutes on a core", canary="analyze"),
    Result("figures/paper-scale/cpu/*/heads.json",
           "hmmtf heads models/paper-scale-cpu/POINT --out figures/paper-scale/cpu/POINT --ceiling-particles 0 "
           "--threads 1 (no ceiling at 128 states; POINT: sparse-2x4x64-2x, paper-2x4x64-4x and the depth ladder's "
           "networks)", HEADS,
           needs="the point's run folder, models/paper-scale-cpu/POINT; a few minutes on a core", canary="heads"),
    Result("figures/paper-scale/cpu/*/beliefs.json",
           "hmmtf beliefs models/paper-scale-cpu/POINT --out figures/paper-scale/cpu/POINT --ceiling-particles 0 "
           "--threads 1 (no ceiling at 128 states; POINT: sparse-2x4x64-2x, paper-2x4x64-4x and the depth ladder's "
           "networks)", BELIEFS,
           needs="the point's run folder, models/paper-scale-cpu/POINT; a few minutes on a core", canary="beliefs"),
    Result("figures/families/signal.json", "hmmtf signal --out figures/families",
           ("empirical/yardsticks/signal.py", "empirical/yardsticks/competence.py", "empirical/yardsticks/ngram.py", "empirical/yardsticks/regime.py",
            "empirical/yardsticks/hand_built.py", "hmm/prior_predictive.py", "hmm/particle_filter.py", "hmm/markov.py", "hmm/observability.py",
            "hmm/families.py", "hmm/memory.py", *MIXTURE),
           needs="about 25 minutes on a loaded core (the paper family's ceiling is most of it)", canary="signal"),
    Result("figures/families/paper-scale/family_calibration.json",
           "hmmtf family-calibration --out figures/families/paper-scale --threads 1",
           ("empirical/yardsticks/family_calibration.py", "empirical/yardsticks/signal.py", "empirical/yardsticks/competence.py", "empirical/yardsticks/ngram.py",
            "empirical/yardsticks/regime.py", "empirical/yardsticks/hand_built.py", "hmm/memory.py", *MIXTURE),
           needs="about 17 minutes of a core (25 families x 512 prompts; 30 minutes of wall time on 2 shared cores)",
           canary="family-calibration"),
    *(result for family in REGIME_MODEL_FAMILIES for result in regime_model_results(family)),
    Result("figures/curves/*/curves.json",
           "hmmtf curves models/curves/RUN ... --title TITLE --out figures/curves/POINT (POINT: the family; the command is in the JSON)",
           CURVE_STUDY,
           needs="the runs' folders (models/curves/RUN; to extend a run, first `hmmtf restore-checkpoint "
                 "models/curves/RUN/checkpoint`, then its recorded hmmtf curve command)",
           canary="curves"),
    Result("figures/plateau/verdicts/*/ngram-verdict.json",
           "hmmtf ngram-verdict models/plateau/POINT --out figures/plateau/verdicts/POINT --threads 1 (POINT: each "
           "run of the plateau study in models/plateau, at its last checkpoint; the runs' hmmtf curve commands are in "
           "models/README.md)",
           NGRAM_VERDICT, needs="the run's folder, models/plateau/POINT (its weights: `hmmtf restore-checkpoint "
                                "models/plateau/POINT/checkpoint --weights-only`); about 3 minutes on a core",
           canary="ngram-verdict"),
    Result("figures/plateau/plateau.json",
           "hmmtf plateau --arm ARM RUN_DIR --baseline plain --verdicts figures/paper-scale/cpu figures/plateau/verdicts "
           "--ceilings figures/competence/ceiling-paper.json --out figures/plateau (one --arm per arm, "
           "its run folders after its name; the command is in the JSON)",
           PLATEAU_STUDY,
           needs="the runs' folders (models/plateau/RUN and models/paper-scale-cpu/paper-2x4x64-4x; to extend a run, "
                 "first `hmmtf restore-checkpoint models/plateau/RUN/checkpoint`, then its recorded hmmtf curve command)",
           canary="plateau"),
    Result("figures/depth/depth.json", f"hmmtf depth --points {' '.join(DEPTH_POINTS)} --out figures/depth",
           ("empirical/studies/depth.py", "empirical/studies/depth_figures.py", "hmmtf/commands/depth.py",
            "empirical/yardsticks/regime.py", "figures/paper-scale/cpu/"),
           needs="the networks' committed results (figures/paper-scale/cpu/RUN); seconds", canary="depth"),
    Result("figures/ladder/*/analysis.json",
           "hmmtf analyze runs/POINT/checkpoint --out figures/ladder/POINT --sections shuffle probes",
           ANALYSIS, needs="the point's checkpoint", canary="analyze"),
    Result("figures/ladder/ladder.json", "hmmtf ladder figures/ladder --out figures/ladder", ("empirical/studies/ladder.py",),
           needs="the points' JSONs (tests/test_empirical_ladder.py checks that it is what they give)", canary="ladder"),
    Result("figures/regime/analysis.json",
           "hmmtf analyze runs/tasks-8192-deep/checkpoint --out figures/regime --sections offsets patching "
           "--probe-tasks 64", ANALYSIS, needs=REGIME_CHECKPOINT, canary="analyze"),
    Result("figures/regime/evaluation.json",
           "hmmtf evaluate runs/tasks-8192-deep/checkpoint --out figures/regime --num-prompts 512 --fresh-tasks 0 "
           "--hand-built-prompts 256", ("empirical/yardsticks/evaluate.py", *ROFORMER, *MIXTURE), needs=REGIME_CHECKPOINT,
           canary="evaluate"),
    Result("figures/regime/hand_built.json",
           "hmmtf evaluate runs/tasks-8192-deep/checkpoint --out figures/regime --num-prompts 512 --fresh-tasks 0 "
           "--hand-built-prompts 256", ("empirical/yardsticks/hand_built.py", "empirical/yardsticks/evaluate.py", *ROFORMER, *MIXTURE,
                                        *CONSTRUCTION, "hmm/memory.py"), needs=REGIME_CHECKPOINT, canary="evaluate"),
)
"""Every result JSON under figures/, in the order the provenance table of docs/claims.md lists them."""

def registered(path: str, results: tuple[Result, ...] = RESULTS) -> Result | None:
    """The result that names ``path``: by its path, or else by the first pattern it matches."""
    return next((result for result in results if result.path == path), None) or next(
        (result for result in results if result.is_pattern and fnmatch.fnmatchcase(path, result.path)), None)


def remedy_for(path: str) -> str:
    """What makes the result at ``path`` again (:meth:`Result.remedy`), or that it is not registered."""
    result = registered(path)
    return result.remedy() if result else f"{path} is not registered in ledger/results.py"
