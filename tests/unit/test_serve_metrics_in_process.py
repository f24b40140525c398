"""`memgap serve-metrics` where nothing is started: its bad arguments refused where they are parsed, label
values escaped and read back by an exposition parser of the test's own, and the docs, the Grafana
dashboard and the alert rules naming only the families the exporter serves. The server on real
processes, scraped over loopback: tests/live/test_serve_metrics.py."""
import json
import os
import re

import pytest

from conftest import HERE
from helpers import parse_exposition as parse


@pytest.mark.parametrize("args, said", [
    ([], "give a PID, --tree PID or --match REGEX"),
    (["--tree"], "give a PID, --tree PID or --match REGEX"),
    (["1", "--match", "x"], "give a PID, --tree PID or --match REGEX"),
    (["--tree", "--match", "x"], "--tree takes a PID"),
    (["--match", "("], "is not a regular expression"),
    (["1", "--port", "65536"], "is not a valid port"),
    (["0"], "is not a valid PID"),
])
def test_bad_arguments_are_one_line_usage_errors(args, said, capsys):
    from memgap.cli import main

    capsys.readouterr()
    code = main(["serve-metrics", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and said in err, (code, err)


def test_label_values_are_escaped_and_read_back():
    from memgap.metrics.export import Family, command_name, render

    fam = Family("memgap_cgroup_usage_bytes", "gauge", "a help with a \\ and a\nnewline")
    odd = 'a "quoted" \\path\nwith a newline'
    fam.add((("cgroup", odd),), 123)
    fam.add((("cgroup", "/plain"),), None)  # not measured: no sample
    families = parse(render([fam, Family("memgap_empty", "gauge", "no samples: left out")]))
    assert families == {"memgap_cgroup_usage_bytes": {
        "help": "a help with a \\\\ and a\\nnewline", "type": "gauge", "samples": [({"cgroup": odd}, 123.0)]}}
    assert command_name(["/usr/bin/python3.11", "-u", "/srv/app/gunicorn", "app:wsgi"]) == "gunicorn"
    assert command_name(["python3", "-m", "uvicorn", "app:app"]) == "uvicorn"
    assert command_name(["/usr/sbin/nginx", "-g", "daemon off;"]) == "nginx"
    assert command_name(["python3", "-c", "pass"]) == "python3"


def test_the_docs_name_only_metrics_the_exporter_serves():
    """The serve-metrics page (docs/commands/serve-metrics.md), the Grafana dashboard and the alert rules against
    the families memgap renders: a renamed metric would leave a dashboard empty without a word."""
    from memgap.metrics.export import collection_families, process_families, scrape_families

    served = {f.name for f in [*process_families([]), *scrape_families(0, 0.0, 0), *collection_families(0, 0, 0)]}
    root = os.path.dirname(HERE)
    with open(os.path.join(root, "docs", "grafana-memgap.json")) as fh:
        dashboard = json.load(fh)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 6 and all(p["datasource"] for p in dashboard["panels"])
    with open(os.path.join(root, "docs", "alerts.yml")) as fh:
        alerts = fh.read()
    rules = re.findall(r"^ +- alert: (\w+)\n +expr: .+?\n +for: \d+m\n +labels:", alerts, re.M | re.S)
    assert len(rules) == 3 == alerts.count("- alert:"), rules
    with open(os.path.join(root, "docs", "commands", "serve-metrics.md")) as fh:
        section = fh.read()
    named = set(re.findall(r"memgap_\w+", " ".join([*exprs, alerts, section])))
    # the page names the cgroup family's members by their suffix after the first
    named |= {f"memgap_cgroup{s}" for s in re.findall(r"`(_\w+_bytes)`", section)}
    assert named - served == set() and served - named == set(), (named - served, served - named)
