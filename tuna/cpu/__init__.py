"""CPU analyses: IR-tier estimate now; disassembly, loop mapping, cache model and simulator to come."""
