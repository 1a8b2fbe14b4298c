"""The machine a result was measured on, for the line printed above a table: a timing means
little without the CPU, the kernel, the code's revision and how busy the box was."""

import datetime
import os
import platform
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def load_average():
    """The 1, 5 and 15 minute load averages, e.g. '0.52 0.31 0.20'."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def git_rev():
    """The short commit of the checkout these benches live in; '?' outside a checkout."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=HERE).stdout.strip()
    except OSError:
        rev = ""
    return rev or "?"


def cpu_model():
    """/proc/cpuinfo's first model name; '?' where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name")), "?")
    except OSError:
        return "?"


def host_cpus():
    """'HOST, N CPUs'."""
    return f"{platform.node()}, {os.cpu_count()} CPUs"


def describe(start_load):
    """When, which code and which machine, and the load average at the start (given; taken
    with load_average() before the run) and now, at its end."""
    return (f"{datetime.datetime.now().isoformat(timespec='seconds')}, git {git_rev()}, "
            f"{platform.node()}: {os.cpu_count()} CPUs ({cpu_model()}), Linux "
            f"{platform.release()}, load average {start_load} at start, {load_average()} at end")
