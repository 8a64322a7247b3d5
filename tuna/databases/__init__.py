"""MetaSchedule databases read without TVM: the files, the records, old traces and workloads."""
