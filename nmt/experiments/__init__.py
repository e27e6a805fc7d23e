"""Experiments beyond translation in the paper: Table 3 variations, constituency parsing (6.3)."""
