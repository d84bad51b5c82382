"""Reading a simulator's (or any server's) /metrics in tests."""
import urllib.request


def counter(url, name, timeout=10):
    """The value of the unlabelled sample `name` in `url`/metrics, or None when absent."""
    with urllib.request.urlopen(url + "/metrics", timeout=timeout) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None
