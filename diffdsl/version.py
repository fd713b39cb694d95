"""The version of diffdsl, alone at the bottom layer so any module may read it."""

__version__ = "0.1.0"
