"""How figures are rounded and binned in the compliance documents: one place, pinned by tests.

Why a module of its own: the Code of Practice asks for parameters, FLOPs and energy "with at least two
significant figures" and for size bins whose edges must not shift between documents or releases.

- Two significant figures use decimal half-up rounding on the exact value (integers stay exact; a float is
  taken at its shortest repr), so 9.45e11 gives 9.5e11 whatever binary floating point would do.
- Text size bins (AI Office template, section 1.3): "less than 1 billion tokens" below 1e9;
  "1 billion to 10 trillion tokens" from 1e9 up to and including 1e13; "more than 10 trillion tokens" above.
- Parameter size bins (Model Documentation Form, "total model size" and, for a MoE, the active parameters in
  the same bins): 1-500M, 500M-5B, 5B-15B, 15B-50B, 50B-100B, 100B-500B, 500B-1T, >1T, as in the Word
  template of the final form (Mistral Large 3's published form reads "500B-1T total / 15B-50B active"). Each
  bin includes its upper edge ("500B-1T" is 5e11 < n <= 1e12; ">1T" is n > 1e12); "1-500M" is n <= 5e8.
- Training time ranges (form): months of 365.25 / 12 days; "<1 month", "1-3 months" (1 <= m <= 3),
  "3-6 months" (3 < m <= 6), ">6 months".
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

TEXT_SIZE_BINS: tuple[str, ...] = ("less than 1 billion tokens", "1 billion to 10 trillion tokens", "more than 10 trillion tokens")
PARAMETER_BINS: tuple[tuple[float, str], ...] = (
    (5e8, "1-500M"), (5e9, "500M-5B"), (1.5e10, "5B-15B"), (5e10, "15B-50B"), (1e11, "50B-100B"), (5e11, "100B-500B"),
    (1e12, "500B-1T"), (float("inf"), ">1T"),
)
TRAINING_TIME_RANGES: tuple[str, ...] = ("<1 month", "1-3 months", "3-6 months", ">6 months")
DAYS_PER_MONTH = 365.25 / 12


def _decimal(x: int | float) -> Decimal:
    return Decimal(x) if isinstance(x, int) else Decimal(repr(float(x)))


def sig2(x: int | float) -> str:
    """Two significant figures in E notation without '+' or leading zeros: 948_700_000_000 -> '9.5e11'."""
    d = _decimal(x)
    if d == 0:
        return "0.0e0"
    sign = "-" if d < 0 else ""
    d = abs(d)
    exp = d.adjusted()
    mant = d.scaleb(-exp).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    if mant >= 10:  # 9.96 -> 10.0: carry into the exponent
        mant, exp = (mant / 10).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP), exp + 1
    return f"{sign}{mant}e{exp}"


def sci(x: int | float) -> str:
    """Two significant figures as people write them: '9.5 × 10^11'."""
    mant, _, exp = sig2(x).partition("e")
    return f"{mant} × 10^{exp}"


def order_of_magnitude(x: int | float) -> int:
    """The power of ten of the two-significant-figure value (9.96e24 counts as 10^25)."""
    return int(sig2(x).partition("e")[2])


def text_size_bin(tokens: int | float) -> str:
    if tokens < 1e9:
        return TEXT_SIZE_BINS[0]
    if tokens <= 1e13:
        return TEXT_SIZE_BINS[1]
    return TEXT_SIZE_BINS[2]


def parameter_bin(params: int | float) -> str:
    for upper, label in PARAMETER_BINS:
        if params <= upper:
            return label
    raise AssertionError("unreachable: the last bin has no upper edge")


def training_time_range(seconds: float) -> str:
    months = seconds / 86_400 / DAYS_PER_MONTH
    if months < 1:
        return TRAINING_TIME_RANGES[0]
    if months <= 3:
        return TRAINING_TIME_RANGES[1]
    if months <= 6:
        return TRAINING_TIME_RANGES[2]
    return TRAINING_TIME_RANGES[3]


def percent(share: float) -> str:
    """A share for people: 2 decimals (0.04167 -> '4.17%')."""
    return f"{share * 100:.2f}%"


def with_sig2(x: int | float) -> str:
    """An exact count with its two-significant-figure form: '948,700,000,000 (9.5 × 10^11)'."""
    exact = f"{x:,}" if isinstance(x, int) else f"{x:,.6g}"
    return f"{exact} ({sci(x)})"
