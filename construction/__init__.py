"""The hand-wired transformer of arXiv 2506.01919, stage by stage (formulas: docs/construction.md).

An attention-only, residual, non-causal network whose weights are set by hand: embedding with a
named layout, stage 1 history layers (A matrix; or the doubling variant), stage 2 label layer(s)
(B matrix) and the sample indicator, stage 3 T exact gradient-descent layers of 2p ReLU heads
(Bai et al. 2023), stage 4 read-out of ``W_T x_test``; the Theorem 2 variant adds m label layers
and an exact ReLU-MLP joint one-hot. It takes a token sequence and does not depend on ``hmm``.

Public API::

    spec = construction.parameters_for_prompt(tokens, p, L, gd_steps, future_length=1, doubling=False,
                                              target=1e-9)   # eta = 1/lambda_max, theta, beta, penalty
    spec = construction.ConstructionSpec(num_tokens, history_length, gd_steps, eta, beta, theta,
                                         future_length=1, doubling=False, penalty=None)  # by hand
    net = construction.build_network(spec, tolerance=1e-9, allow_leak=False)
    trace = net.forward(tokens, dtype=torch.float64, record_attention=True, patch=None)
                               # tokens: demo_1, p, ..., demo_n, p, test (1-d ints); patch(name,
                               # stream) -> stream: an intervention after 'embedding' and each layer
    trace.prediction           # (p^m,)  W_T x_test, output slot of the last column
    trace.layer_names          # ('history.1', ..., 'label', 'gd.1', ..., 'gd.T', 'readout')
    net.layers[l].stage, net.layers[l].index   # construction.Stage.GD, 3 for 'gd.3'
    trace.residuals            # tuple of (D, N) tensors: [0] embedding, [l] after layer l
    trace.residual('gd.3'), trace.slot('future.1', layer='label'), trace.features('label')
    trace.attn_logits['label'] # (heads, N, N), [head, query i, key j]
    trace.attn_weights['gd.1'] # softmax weights, or relu(s)/N for the ReLU heads
    batch = construction.forward_batch(specs, tokens_2d)  # B prompts of one length, spec b for row b
                               # (specs differ only in eta and beta); batch.prediction (B, p^m),
                               # batch.slot('output') (B, p^m, N), batch.stream (B, D, N)
    net.layout.rows('weights.0')  # named slots -> row ranges (construction.layout)
    spec.error_bound(N)        # construction-error bound for an N-column prompt (leak x amplification)
    construction.layer_leak(beta, theta, N)          # per-layer softmax leak formula
    construction.amplification(layout, doubling, gd_steps, eta, penalty)  # = spec.amplification()
    construction.choose_beta(target, theta, N, spec.amplification())      # smallest beta for a target
    construction.save_weights(net, path) / construction.load_weights(path)   # safetensors
    construction.reference.*   # plain numpy: history, future, joint, sample_mask,
                               # regression_problem, hessian, gd_iterates, min_norm_solution,
                               # prediction

N = len(tokens) + 1: column 0 is a leading delimiter added by the embedding. Symbols (p, L, m, T
and the rest): docs/construction.md, section 0. CLI:
``hmmtf construction-info --p 4 --L 3 --T 10 [--m 2] [--doubling] [--export FILE]``.
"""
from construction import reference
from construction.batch import BatchTrace, forward_batch
from construction.export import load_weights, save_weights
from construction.layout import Layout, build_layout
from construction.leak import amplification, choose_beta, layer_leak
from construction.network import Network, Trace, build_network, embed
from construction.parameters import parameters_for_prompt
from construction.spec import ConstructionSpec
from construction.weights import Stage

__all__ = [
    "BatchTrace",
    "ConstructionSpec",
    "Layout",
    "Network",
    "Stage",
    "Trace",
    "amplification",
    "build_layout",
    "build_network",
    "choose_beta",
    "embed",
    "forward_batch",
    "layer_leak",
    "load_weights",
    "parameters_for_prompt",
    "reference",
    "save_weights",
]
