"""The subcommand of the ``construction`` package.

``hmmtf construction-info --p 4 --L 3 --T 10`` prints the network's shape (layers, heads per
layer, width) beside the paper's counts, and with ``--export FILE`` writes its weights.
"""
from __future__ import annotations

from construction.export import save_weights
from construction.network import Network, build_network
from construction.parameters import parameters_for_columns
from construction.weights import MLPLayer, Stage
from hmmtf.options import positive_float, positive_int


def describe(network: Network, num_columns: int) -> list[str]:
    """Lines of the shape table: our counts per stage beside the paper's (Theorems 1-2)."""
    spec, layout = network.spec, network.layout
    p, L, m, T = spec.num_tokens, spec.history_length, spec.future_length, spec.gd_steps
    heads_by_stage: dict[Stage, list[int]] = {}
    for layer in network.layers:
        heads_by_stage.setdefault(layer.stage, []).append(0 if isinstance(layer, MLPLayer) else len(layer.heads))
    paper = {
        Stage.HISTORY: f"{L - 1} layers x 1 head (L-1)",
        Stage.LABEL: f"{m} layer(s) x 1 head",
        Stage.JOINT: "one-hot map (Theorem 2)",
        Stage.GD: f"{T} layers x {2 * p**m} heads (T, 2p^m per layer)",
        Stage.READOUT: f"1 layer x {2 * p**m} heads (2p^m)",
    }
    lines = [f"construction p={p} L={L} T={T} m={m} doubling={spec.doubling}", ""]
    lines.append(f"{'stage':<9}{'layers':>7}{'heads/layer':>13}   paper")
    for stage, heads in heads_by_stage.items():
        per_layer = "MLP" if stage is Stage.JOINT else str(heads[0])
        lines.append(f"{stage.value:<9}{len(heads):>7}{per_layer:>13}   {paper[stage]}")
    paper_total = (L - 1) + m + T + 1 + (1 if m >= 2 else 0)
    lines.append(
        f"{'total':<9}{len(network.layers):>7}{'':>13}   {paper_total} layers = (L-1) + m + T + 1 (+1 MLP if m >= 2)"
    )
    lines.append("")
    lines.append(
        f"width D = {layout.width}  (paper: O(p^2 L); its leading term, the W slot, has p^m * pL = {p**m * p * L} rows)"
    )
    lines.append("slots: " + ", ".join(f"{name}[{start}:{stop}]" for name, start, stop in layout.slots))
    lines.append(
        f"eta = {spec.eta:.6g}, theta = {spec.theta:.6g}, penalty = {spec.penalty:.6g}, "
        f"beta = {spec.beta:.6g} (bound {spec.error_bound(num_columns):.3g} at N = {num_columns})"
    )
    return lines


def run_info(args) -> int:
    """Build the network from the command-line arguments, print its shape, optionally export it."""
    eta = 1.0 / args.L if args.eta is None else args.eta
    spec = parameters_for_columns(
        args.columns, args.p, args.L, args.T, eta, future_length=args.m, doubling=args.doubling, target=args.tolerance
    )
    network = build_network(spec, tolerance=args.tolerance)
    print("\n".join(describe(network, args.columns)))
    if args.export:
        save_weights(network, args.export)
        print(f"weights written to {args.export}")
    return 0


def register(subparsers) -> None:
    """Add ``construction-info`` to the ``hmmtf`` parser."""
    parser = subparsers.add_parser(
        "construction-info", help="print the hand-wired network's layers, heads and width beside the paper's counts"
    )
    parser.add_argument("--p", type=positive_int, default=4, help="number of tokens (delimiter = p)")
    parser.add_argument("--L", type=positive_int, default=3, help="history length")
    parser.add_argument("--T", type=positive_int, default=10, help="gradient-descent layers")
    parser.add_argument("--m", type=positive_int, default=1, help="future length (m >= 2: Theorem 2 variant)")
    parser.add_argument("--doubling", action="store_true", help="ceil(log2 L) history layers instead of L-1")
    parser.add_argument("--columns", type=positive_int, default=128, help="longest prompt (columns N) the angle must serve")
    parser.add_argument("--eta", type=positive_float, default=None, help="GD step size (default 1/L < 2/lambda_max)")
    parser.add_argument("--tolerance", type=positive_float, default=1e-9,
                        help="construction error bound beta must reach")
    parser.add_argument("--export", default=None, help="write the weights to this safetensors file")
    parser.set_defaults(run=run_info)
