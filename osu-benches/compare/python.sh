# Sourced by run.sh and report.sh: sets $python to a Python that can import matplotlib.
# Debian's python3-matplotlib serves /usr/bin/python3, which a python3 found first on PATH
# (pyenv, a virtualenv) does not see.
python=python3
if ! python3 -c "import matplotlib" 2>/dev/null &&
    /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
    python=/usr/bin/python3
fi
