"""Print a symbolic Jacobian and Hessian: plain, with shared parts named, and as LaTeX.

Run: python examples/print_symbolic.py
The same from the command line:
  symjac show examples/print_symbolic.py:layer --arg x=2 --arg w=2,2
  symjac show examples/print_symbolic.py:energy --arg q=3 --what hessian --sparsity
"""

import numpy as np

import symjac as sj


def layer(x, w):
    """One tanh layer, squared: x (n,), w (n, m) -> (m,)."""
    return np.tanh(x @ w) ** 2


def energy(q):
    """A chain of springs with a quartic term: q (n,) -> scalar."""
    stretch = q[1:] - q[:-1]
    return np.sum(stretch ** 2 / 2 + stretch ** 4 / 4)


if __name__ == "__main__":
    x, w = np.zeros(2), np.zeros((2, 2))

    # .symbolic(): a real SymPy Matrix, symbols named after the parameters.
    J = sj.jacobian(layer).symbolic(x, w)
    print(type(J).__name__, J.shape)
    print(J[0, 0])

    # sj.show: every shared subexpression named once, the entries in terms of them.
    print(sj.show(sj.jacobian(layer), x, w))

    # A Hessian: zeros are left out, and the size is said first.
    shown = sj.show(sj.hessian(energy), np.zeros(3))
    print(shown)
    print(shown.latex())   # for a paper or a notebook (Jupyter renders shown itself)
