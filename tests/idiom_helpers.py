"""A helper module for test_idioms.py: functions the traced code reaches through
an import (``import idiom_helpers as h``), written the way user code is."""

from math import exp

import numpy as np
from numpy import zeros

SCALE = 2.0


def interior(x):
    out = np.zeros(len(x) + 2)
    out[1:-1] = x
    return out


def laplacian_1d(u):
    du = zeros(u.shape)
    du[1:-1] = u[2:] - 2 * u[1:-1] + u[:-2]
    du[0] = u[1] - 2 * u[0]
    du[-1] = u[-2] - 2 * u[-1]
    return du * SCALE + exp(u[0])
