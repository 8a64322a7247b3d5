"""NVIDIA GPU analyses: IR-tier estimate now; PTX parsing, occupancy and bank conflicts to come."""
