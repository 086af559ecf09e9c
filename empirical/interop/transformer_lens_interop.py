"""The trained RoFormer and the hand-built network in TransformerLens's terms.

* :func:`to_hooked_transformer` turns a :class:`~empirical.training.model.RoFormer` (or a checkpoint
  directory) into a TransformerLens ``HookedTransformer`` with the same weights, so TransformerLens's
  hooks, caches and patching tools run on our models; its cached activations under the names of
  :data:`empirical.training.model.HOOK_NAMES` equal ours (tested).
* :func:`export_hooked_transformer` writes that model as a directory (``config.json``: the
  ``HookedTransformerConfig`` arguments; ``model.safetensors``: its parameters) and
  :func:`load_hooked_transformer` rebuilds it from the directory alone, with no network access.
  CLI: ``hmmtf export CHECKPOINT --to transformer-lens OUT``.
* :func:`hand_built_patterns` gives the hand-built network's softmax attention in the layout of
  TransformerLens's ``hook_pattern``, ``(batch, head, query, key)``, so one plotting function
  serves both networks.

How our RoFormer maps onto ``HookedTransformerConfig`` (see :func:`hooked_transformer_config`):
pre-norm LayerNorm blocks with ``eps = 1e-5`` (``nn.LayerNorm``'s default) -> ``normalization_type="LN"``;
``nn.GELU()`` is the exact erf GELU -> ``act_fn="gelu"`` (TransformerLens's ``"gelu_new"`` is the
tanh approximation); rotary embeddings on every coordinate pair ``(2i, 2i+1)`` of each head ->
``positional_embedding_type="rotary"``, ``rotary_adjacent_pairs=True``, ``rotary_dim=d_head``,
same ``rotary_base``; no absolute position embedding; logits ``= LN_final(x) U^T`` with no bias ->
``b_U = 0``; a tied unembedding is exported as a copy ``W_U = E^T`` (``HookedTransformer`` has no
tying). A model TransformerLens cannot express is refused (:func:`check_expressible`).

``transformer_lens`` (the optional extra ``interp``) is imported only inside the functions that
build a ``HookedTransformer``; :func:`hooked_transformer_config`, :func:`hooked_transformer_state_dict`
and :func:`export_hooked_transformer` work without it. TransformerLens 4.0 removed
``HookedTransformer`` (in favour of ``TransformerBridge``, which wraps Hugging Face models), hence
the extra's ``<4``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from construction import Stage, Trace
from empirical.training.checkpoint import load_checkpoint, with_umask_mode
from empirical.training.model import RoFormer, RoFormerConfig
from empirical.training.result_files import EXPORT_CONFIG_FILE, EXPORT_WEIGHTS_FILE


DEFAULT_CONTEXT_LENGTH = 2048
"""``n_ctx`` of the exported model: the longest prompt it accepts (TransformerLens needs a bound,
our RoFormer has none; the paper's prompts have 263 tokens)."""

LAYER_NORM_EPS = 1e-5
"""``eps`` of every ``nn.LayerNorm`` of :class:`~empirical.training.model.RoFormer` (PyTorch's default)."""

EXPRESSIBLE_FIELDS = {
    "vocab_size": "d_vocab = d_vocab_out",
    "num_layers": "n_layers",
    "num_heads": "n_heads",
    "width": "d_model (d_head = width / num_heads)",
    "mlp_ratio": "d_mlp = mlp_ratio * width",
    "rotary_base": "rotary_base",
    "tie_embeddings": "W_U = E^T, copied",
    "init_std": "initialisation only; not part of the function the model computes",
    "attention_scale": "attn_scale = sqrt(d_head) / attention_scale (HookedTransformer divides the scores by it)",
}
"""Every :class:`~empirical.training.model.RoFormerConfig` field the export knows, and where it goes."""

SOFTMAX_STAGES = (Stage.HISTORY, Stage.LABEL)
"""Stages of the hand-built network whose heads are softmax heads (the ``gd`` and ``readout``
heads are ReLU heads, ``joint`` an MLP)."""


def check_expressible(config: RoFormerConfig) -> None:
    """``ValueError`` naming the first field of ``config`` that the export has no translation for
    (e.g. a normalisation placement ``HookedTransformer`` lacks, such as BERT-style post-norm)."""
    for field in dataclasses.fields(config):
        if field.name not in EXPRESSIBLE_FIELDS:
            raise ValueError(
                f"{type(config).__name__}.{field.name}: {getattr(config, field.name)!r} has no "
                f"TransformerLens HookedTransformer equivalent in this export; expected a config with "
                f"only the fields {sorted(EXPRESSIBLE_FIELDS)}"
            )


def hooked_transformer_config(config: RoFormerConfig, dtype: torch.dtype = torch.float32,
                              context_length: int = DEFAULT_CONTEXT_LENGTH) -> dict:
    """Keyword arguments of ``HookedTransformerConfig`` (JSON values; ``dtype`` as its name) for
    a RoFormer of shape ``config`` with parameters of ``dtype``, accepting prompts of up to
    ``context_length`` tokens. Mapping: module docstring."""
    check_expressible(config)
    if isinstance(context_length, bool) or not isinstance(context_length, int) or context_length < 1:
        raise ValueError(f"context_length: {context_length!r}; expected an integer >= 1")
    return {
        "model_name": "hmmtf-roformer",
        "original_architecture": "hmmtf.RoFormer",
        "n_layers": config.num_layers,
        "d_model": config.width,
        "n_heads": config.num_heads,
        "d_head": config.head_dim,
        "d_mlp": config.mlp_ratio * config.width,
        "d_vocab": config.vocab_size,
        "d_vocab_out": config.vocab_size,
        "n_ctx": context_length,
        "act_fn": "gelu",
        "normalization_type": "LN",
        "eps": LAYER_NORM_EPS,
        "positional_embedding_type": "rotary",
        "rotary_dim": config.head_dim,
        "rotary_base": config.rotary_base,
        "rotary_adjacent_pairs": True,
        "attention_dir": "causal",
        "attn_scale": math.sqrt(config.head_dim) / config.attention_scale,
        "default_prepend_bos": False,
        "dtype": str(dtype).removeprefix("torch."),
    }


def hooked_transformer_state_dict(model: RoFormer) -> dict[str, torch.Tensor]:
    """``model``'s parameters under ``HookedTransformer`` names and shapes (``H`` heads of size
    ``d``, block ``l``, PyTorch ``Linear`` weights ``(out, in)``)::

        W_Q[h] = qkv.weight[h d : (h+1) d].T        (W, d);  W_K, W_V: rows W + h d.., 2W + h d..
        b_Q[h] = qkv.bias[h d : (h+1) d]            (d,)
        W_O[h] = out.weight[:, h d : (h+1) d].T     (d, W);  b_O = out.bias
        W_in = mlp[0].weight.T (W, F), W_out = mlp[2].weight.T (F, W), biases as they are
        ln1.w, ln1.b, ln2.w, ln2.b, ln_final.w, ln_final.b = LayerNorm weight, bias
        W_E = embed.weight (V, W), W_U = unembed.weight.T (W, V), b_U = 0

    Every tensor is a fresh contiguous copy (a tied ``E`` gives two independent copies).
    """
    check_expressible(model.config)
    heads, head_dim, width = model.config.num_heads, model.config.head_dim, model.config.width
    weights = {"embed.W_E": model.embed.weight}
    for layer, block in enumerate(model.blocks):
        prefix = f"blocks.{layer}."
        query_key_value = block.attn.qkv.weight.view(3, heads, head_dim, width).transpose(-1, -2)
        query_key_value_bias = block.attn.qkv.bias.view(3, heads, head_dim)
        for index, part in enumerate("QKV"):
            weights[f"{prefix}attn.W_{part}"] = query_key_value[index]
            weights[f"{prefix}attn.b_{part}"] = query_key_value_bias[index]
        weights[f"{prefix}attn.W_O"] = block.attn.out.weight.T.reshape(heads, head_dim, width)
        weights[f"{prefix}attn.b_O"] = block.attn.out.bias
        weights[f"{prefix}mlp.W_in"] = block.mlp[0].weight.T
        weights[f"{prefix}mlp.b_in"] = block.mlp[0].bias
        weights[f"{prefix}mlp.W_out"] = block.mlp[2].weight.T
        weights[f"{prefix}mlp.b_out"] = block.mlp[2].bias
        for norm_name, norm in (("ln1", block.ln1), ("ln2", block.ln2)):
            weights[f"{prefix}{norm_name}.w"], weights[f"{prefix}{norm_name}.b"] = norm.weight, norm.bias
    weights["ln_final.w"], weights["ln_final.b"] = model.ln_final.weight, model.ln_final.bias
    weights["unembed.W_U"] = model.unembed.weight.T
    weights["unembed.b_U"] = torch.zeros_like(model.unembed.weight[:, 0])
    return {name: tensor.detach().clone().contiguous() for name, tensor in weights.items()}


def build_hooked_transformer(config_kwargs: dict, state_dict: dict[str, torch.Tensor],
                             device: torch.device | str = "cpu"):
    """``HookedTransformer(HookedTransformerConfig(**config_kwargs))`` on ``device`` with the
    parameters ``state_dict`` (all of them, no others; its buffers, e.g. the rotary tables, are
    the ones TransformerLens computes from the config)."""
    try:
        from transformer_lens import HookedTransformer, HookedTransformerConfig
    except ImportError as error:  # not installed, or TransformerLens >= 4 (no HookedTransformer)
        raise ImportError(
            f"{error}; expected TransformerLens >= 3.9, < 4, the optional extra: pip install -e '.[interp]'"
        ) from error

    dtype = getattr(torch, config_kwargs["dtype"])
    config = HookedTransformerConfig(**dict(config_kwargs, dtype=dtype, device=str(device)))
    with warnings.catch_warnings():
        # TransformerLens 3.x announces HookedTransformer's removal in 4.0; the extra pins < 4.
        warnings.filterwarnings("ignore", message="HookedTransformer is deprecated", category=DeprecationWarning)
        model = HookedTransformer(config)
    parameters = {name for name, _ in model.named_parameters()}
    if set(state_dict) != parameters:
        raise ValueError(
            f"state_dict: missing {sorted(parameters - set(state_dict))}, unexpected "
            f"{sorted(set(state_dict) - parameters)}; expected exactly the parameters of the HookedTransformer"
        )
    model.load_state_dict(state_dict, strict=False)
    return model.eval()


def to_hooked_transformer(model_or_checkpoint: RoFormer | str | Path, context_length: int = DEFAULT_CONTEXT_LENGTH,
                          device: torch.device | str = "cpu"):
    """A TransformerLens ``HookedTransformer`` computing the same function as the RoFormer (or
    the RoFormer of the checkpoint directory), in its parameters' dtype, on ``device``."""
    model = _roformer(model_or_checkpoint)
    config_kwargs = hooked_transformer_config(model.config, model.embed.weight.dtype, context_length)
    return build_hooked_transformer(config_kwargs, hooked_transformer_state_dict(model), device)


def export_hooked_transformer(model_or_checkpoint: RoFormer | str | Path, directory: str | Path,
                              context_length: int = DEFAULT_CONTEXT_LENGTH, source: dict | None = None) -> Path:
    """Write ``directory/config.json`` (``{"hooked_transformer_config": kwargs, "source": source}``)
    and ``directory/model.safetensors`` (:func:`hooked_transformer_state_dict`); return ``directory``."""
    model = _roformer(model_or_checkpoint)
    config_kwargs = hooked_transformer_config(model.config, model.embed.weight.dtype, context_length)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(hooked_transformer_state_dict(model), str(directory / EXPORT_WEIGHTS_FILE))
    with_umask_mode(directory / EXPORT_WEIGHTS_FILE)
    document = {"hooked_transformer_config": config_kwargs, "source": source or {}}
    (directory / EXPORT_CONFIG_FILE).write_text(json.dumps(document, indent=2, allow_nan=False) + "\n")
    return directory


def load_hooked_transformer(directory: str | Path, device: torch.device | str = "cpu"):
    """The ``HookedTransformer`` written by :func:`export_hooked_transformer` to ``directory``."""
    directory = Path(directory)
    config_path = directory / EXPORT_CONFIG_FILE
    if not config_path.is_file():
        raise ValueError(f"directory: {str(directory)!r} has no {EXPORT_CONFIG_FILE}; expected a TransformerLens export")
    config_kwargs = json.loads(config_path.read_text())["hooked_transformer_config"]
    return build_hooked_transformer(config_kwargs, load_file(str(directory / EXPORT_WEIGHTS_FILE)), device)


def _roformer(model_or_checkpoint: RoFormer | str | Path) -> RoFormer:
    """The model itself, or the model of a checkpoint directory (loaded on the CPU)."""
    if isinstance(model_or_checkpoint, RoFormer):
        return model_or_checkpoint
    if isinstance(model_or_checkpoint, (str, Path)):
        return load_checkpoint(Path(model_or_checkpoint)).model
    raise TypeError(
        f"model_or_checkpoint: {type(model_or_checkpoint).__name__}; expected a RoFormer or a checkpoint directory"
    )


def hand_built_patterns(traces: Sequence[Trace]) -> dict[str, torch.Tensor]:
    """Attention weights of the hand-built network's softmax layers (:data:`SOFTMAX_STAGES`) in
    TransformerLens's ``hook_pattern`` layout: ``{layer name: (B, heads, query, key)}``, entry
    ``[b, h, i, j] = trace_b.attn_weights[name][h, i, j]`` for ``B`` traces of equal length.

    Every row is a softmax over all ``N`` columns, so it sums to 1; column ``c`` holds prompt token
    ``c - 1`` (column 0 is the leading delimiter, :func:`construction.embed`). The ReLU heads
    (``relu(s) / N``) are left out: their rows are not distributions.
    """
    if not traces:
        raise ValueError("traces: empty; expected at least one construction.Trace")
    names = traces[0].layers_of(*SOFTMAX_STAGES)
    for index, trace in enumerate(traces):
        missing = [name for name in names if name not in trace.attn_weights]
        if missing:
            raise ValueError(
                f"traces[{index}]: no attention weights for {missing}; expected traces of "
                f"Network.forward(..., record_attention=True) with the layers {names}"
            )
    shapes = {tuple(trace.attn_weights[names[0]].shape) for trace in traces}
    if len(shapes) > 1:
        raise ValueError(
            f"traces: attention shapes {sorted(shapes)}; expected prompts of one length and one network shape"
        )
    return {name: torch.stack([trace.attn_weights[name] for trace in traces]) for name in names}
