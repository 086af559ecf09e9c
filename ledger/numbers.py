"""How the ledger writes numbers: every number on its pages goes through these."""
from __future__ import annotations

import re


def sig(value: float, digits: int = 3) -> str:
    """``digits`` significant digits, exponent without sign padding:
    ``0.01555 -> "0.0156"``, ``1.5344e-12 -> "1.53e-12"``, ``12345 -> "1.23e4"``, ``96 -> "96"``."""
    text = f"{value:.{digits}g}"
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m[1] == "-" else "") + m[2], text)


def span(low: float, high: float, digits: int = 3) -> str:
    """``"0.0167 to 0.117"``, or one number when both ends print alike: ``span(1.31, 1.31) -> "1.31"``."""
    low_text, high_text = sig(low, digits), sig(high, digits)
    return low_text if low_text == high_text else f"{low_text} to {high_text}"


def fixed(value: float, decimals: int = 3) -> str:
    """``0.40609 -> "0.406"``."""
    return f"{value:.{decimals}f}"


def interval(value: float, low: float, high: float, decimals: int = 3) -> str:
    """``0.406 [0.378, 0.436]``: an estimate and its 95% interval."""
    return f"{fixed(value, decimals)} [{fixed(low, decimals)}, {fixed(high, decimals)}]"


def plus_minus(value: float, error: float, decimals: int = 3) -> str:
    """``0.297 ± 0.005``: an estimate and its standard error."""
    return f"{fixed(value, decimals)} ± {fixed(error, decimals)}"


def percent(fraction: float) -> str:
    """``0.08775 -> "8.8%"``."""
    return f"{100 * fraction:.1f}%"


def listed(values, format_one=fixed) -> str:
    """``[0.818, 0.871] -> "0.818, 0.871"``."""
    return ", ".join(format_one(value) for value in values)
