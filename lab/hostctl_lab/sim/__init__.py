"""The cluster simulator: placement, contention and scheduling of many DL training jobs."""
