"""The cluster simulator: the policies' own code on a fluid model of a cluster (``hostctl sim``)."""
