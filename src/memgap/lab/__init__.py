"""The remedy lab: run a workload under allocator variants, repeated and interleaved,
and recommend the cheapest variant that works."""
