"""The cluster simulator: a discrete-time, trace-driven model of many DL training jobs on a shared fabric."""
