"""Numbers to CSV text, compiled with the step: result files of a million rows in a few hundredths
of a second (formatting them in Python took longer than simulating them).

``format_rows`` writes rows of columns held as float64 (integers are exact up to 2^53): a column is
an integer (``INT``), a number with 9 significant digits as printf's ``%.9g`` writes it (``G9``;
NaN is an empty field), or an index into a table of ready-made strings (``STR``).
"""

from __future__ import annotations

import math

INT, G9, STR = range(3)

COLD = ("format_rows",)  # not inlined (see build.py)


def _put_digits(out, pos, v, n):
    """The ``n`` decimal digits of ``v`` >= 0 (zero-padded on the left)."""
    for k in range(n - 1, -1, -1):
        out[pos + k] = 48 + v % 10
        v //= 10
    return pos + n


def _num_digits(v):
    n = 1
    while v >= 10:
        v //= 10
        n += 1
    return n


def put_int(out, pos, v):
    if v < 0:
        out[pos] = 45  # -
        pos += 1
        v = -v
    return _put_digits(out, pos, v, _num_digits(v))


def _split(a):
    c = 134217729.0 * a  # 2**27 + 1 (Veltkamp)
    hi = c - (c - a)
    return hi, a - hi


def _product_error(a, b, p):
    """The rounding error of the float product p = a * b, exactly (Dekker's two-product)."""
    ah, al = _split(a)
    bh, bl = _split(b)
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _scaled(x, k):
    """x * 10**k rounded to the nearest integer, ties to even, as the exact decimal value would round.

    The float r = x * 10**k is within half an ulp of the exact product, and its fraction is a whole
    number of ulps, so it falls on the same side of .5 as the exact product unless it is exactly .5;
    only then does the rounding error (computed exactly) decide."""
    p = 10.0 ** abs(k)
    r = x * p if k >= 0 else x / p
    f = math.floor(r)
    d = r - f
    if d == 0.5:
        if k >= 0:
            above = _product_error(x, p, r)  # x * p - r, exactly: > 0 when the exact value is above r
        else:
            q = r * p
            above = (x - q) - _product_error(r, p, q)  # x - r * p: > 0 when x / p is above r
        if above > 0 or (above == 0 and f % 2 == 1):
            f += 1
    elif d > 0.5:
        f += 1
    return int(f)


def put_g9(out, pos, x):
    """``x`` as ``%.9g`` writes it (NaN: nothing)."""
    if x != x:
        return pos
    if x < 0:
        out[pos] = 45
        pos += 1
        x = -x
    if x == 0:
        out[pos] = 48
        return pos + 1
    if x == math.inf:
        out[pos], out[pos + 1], out[pos + 2] = 105, 110, 102  # inf
        return pos + 3
    if x < 1e-290:  # beyond what 10**k can scale; never a time, count or ratio
        out[pos] = 48
        return pos + 1
    if x > 1e290:
        out[pos], out[pos + 1], out[pos + 2] = 105, 110, 102
        return pos + 3
    e = int(math.floor(math.log10(x)))
    m = _scaled(x, 8 - e)
    if m >= 1_000_000_000:
        e += 1
        m = _scaled(x, 8 - e)
    elif m < 100_000_000:
        e -= 1
        m = _scaled(x, 8 - e)
    nd = 9  # significant digits left once trailing zeros go
    while nd > 1 and m % 10 == 0:
        m //= 10
        nd -= 1
    if e < -4 or e >= 9:  # d.ddde[+-]XX
        pos = _put_digits(out, pos, m // 10 ** (nd - 1), 1)
        if nd > 1:
            out[pos] = 46
            pos = _put_digits(out, pos + 1, m % 10 ** (nd - 1), nd - 1)
        out[pos] = 101  # e
        out[pos + 1] = 45 if e < 0 else 43
        a = -e if e < 0 else e
        return _put_digits(out, pos + 2, a, 2 if a < 100 else 3)
    if e < 0:  # 0.000ddd
        out[pos] = 48
        out[pos + 1] = 46
        pos += 2
        for _ in range(-e - 1):
            out[pos] = 48
            pos += 1
        return _put_digits(out, pos, m, nd)
    if nd <= e + 1:  # an integer: ddd000
        pos = _put_digits(out, pos, m, nd)
        for _ in range(e + 1 - nd):
            out[pos] = 48
            pos += 1
        return pos
    pos = _put_digits(out, pos, m // 10 ** (nd - e - 1), e + 1)  # ddd.ddd
    out[pos] = 46
    return _put_digits(out, pos + 1, m % 10 ** (nd - e - 1), nd - e - 1)


def format_rows(vals, kinds, strtab, stroff, out):
    """Rows ``vals[:, r]`` as CSV lines into ``out`` (large enough); returns the bytes written."""
    ncols, nrows = vals.shape
    pos = 0
    for r in range(nrows):
        for c in range(ncols):
            if c:
                out[pos] = 44  # ,
                pos += 1
            v = vals[c, r]
            k = kinds[c]
            if k == INT:
                if v == v:
                    pos = put_int(out, pos, int(v))
            elif k == G9:
                pos = put_g9(out, pos, v)
            else:
                i = int(v)
                for j in range(stroff[i], stroff[i + 1]):
                    out[pos] = strtab[j]
                    pos += 1
        out[pos] = 10  # newline
        pos += 1
    return pos
