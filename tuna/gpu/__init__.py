"""NVIDIA GPU analyses: the IR tier (with its box footprints), and the full tier on PTX.

The full tier's parts: the PTX parser, loops and trip counts, bank conflicts, nvcc.
"""
