"""Fluid models of the lab scenarios (run them with ``python -m hostctl_lab.fluid.<name> --help``)."""
