"""NVIDIA GPU analyses: the IR tier, and the full tier on PTX (parser, loops and trip counts, bank conflicts)."""
