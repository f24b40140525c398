"""A process's own memory figures, as the tests' programs write them for a witness: one line
"PID RSS PSS USS" (bytes, from /proc/self/status and smaps_rollup) appended to a file."""
import os


def write_own_figures(path: str) -> None:
    fields = {}
    for name in ("status", "smaps_rollup"):
        with open(f"/proc/self/{name}") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                fields[key] = int(value.split()[0]) * 1024 if value.split()[1:] == ["kB"] else 0
    uss = fields["Private_Clean"] + fields["Private_Dirty"]
    with open(path, "a") as out:
        out.write(f"{os.getpid()} {fields['VmRSS']} {fields['Pss']} {uss}\n")
