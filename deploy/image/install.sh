#!/bin/sh
# Builds the project's wheel from SOURCE and installs it, with its dependencies, into a new virtual
# environment at VENV that has no pip, setuptools or wheel of its own (nothing installs at run time).
# The Dockerfile's builder stage runs it, and so does tests/test_image_install.py: the image and the check
# install the same way, from the same build context.
#   usage: install.sh SOURCE VENV
set -eu
src=$1
venv=$2
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
python3 -m pip wheel --quiet --no-deps --wheel-dir "$wheels" "$src"
python3 -m venv --without-pip "$venv"
python3 -m pip --python "$venv/bin/python" install --quiet "$wheels"/*.whl
