"""The job environment's NCCL: a container image's Config.Env (the real recorded one, the
one-line `--format '{{json .Config.Env}}'` form and the whole `docker inspect` record) and
`module show` (Environment Modules' and Lmod's command syntax), and garbage."""

from __future__ import annotations

import json

import pytest

from stetho.parsers import ParseError, nccl_env
from tests.conftest import REPO

IMAGES = sorted((REPO / "fixtures" / "real" / "14-nccl-env").glob("docker-inspect-*.json"))


@pytest.mark.parametrize("path", IMAGES, ids=lambda p: p.name)
def test_recorded_image_env(path):
    got = nccl_env.image_env(path.read_text())
    assert got.version == "2.20.5"  # the package revision (-1) dropped
    assert got.evidence == "NCCL_VERSION=2.20.5-1"


def test_one_line_and_whole_record_forms():
    env = json.loads(IMAGES[0].read_text())
    assert nccl_env.image_env(json.dumps(env)).version == "2.20.5"
    record = [{"Id": "sha256:0", "Config": {"Env": env, "Cmd": None}}]
    assert nccl_env.image_env(json.dumps(record, indent=4)).version == "2.20.5"


def test_image_without_nccl():
    got = nccl_env.image_env('["PATH=/usr/bin","LANG=C.UTF-8"]\n')
    assert got.version is None and "NCCL_VERSION" in got.evidence


# `module show` layouts (the command syntax of Environment Modules and Lmod; written here, no
# public recording of an NCCL module's display was found)
TCL = ("-------------------------------------------------------------------\n"
       "/usr/share/modulefiles/nccl/2.21.5:\n\nmodule-whatis\t{NCCL 2.21.5}\n"
       "setenv\t\tNCCL_VERSION 2.21.5\nprepend-path\tLD_LIBRARY_PATH /opt/nccl/2.21.5/lib\n"
       "-------------------------------------------------------------------\n")
LMOD = ('----------------------------------------------------------------------------\n'
        '   /opt/modulefiles/nccl/2.24.3.lua:\n'
        '----------------------------------------------------------------------------\n'
        'whatis("Name: nccl")\nsetenv("NCCL_HOME","/opt/nccl/2.24.3")\n'
        'prepend_path("LD_LIBRARY_PATH","/global/common/software/nccl/2.24.3/lib")\n')


@pytest.mark.parametrize("text, version", [
    (TCL, "2.21.5"),
    (LMOD, "2.24.3"),  # no NCCL_VERSION: the versioned nccl folder on its paths
    ('setenv("NCCL_VERSION","2.18.3-1")\n', "2.18.3"),
    ("prepend-path LD_LIBRARY_PATH /apps/nccl_2.21.5-1+cuda12.4_x86_64/lib\n", "2.21.5"),
    ("module-whatis {libnccl.so.2.19.3 in /opt/x/lib}\n", "2.19.3"),
])
def test_module_show(text, version):
    assert nccl_env.module_show(text).version == version


def test_module_without_nccl():
    got = nccl_env.module_show("prepend-path PATH /opt/tool/bin\n")
    assert got.version is None


@pytest.mark.parametrize("text", [
    "ERROR: Unable to locate a modulefile for 'nccl/9.9'\n",
    "Lmod has detected the following error:  The following module(s) are unknown: \"nccl\"\n",
    "sh: 1: module: not found\n", "", "\x00\x01", "hello world\n",
])
def test_module_garbage(text):
    with pytest.raises(ParseError) as exc:
        nccl_env.module_show(text)
    assert exc.value.tool == "module show"


@pytest.mark.parametrize("text", ["", "\x00\x01", "Error: No such image: x\n", "[1, 2]",
                                  '{"Config": {"Env": null}}', '["NCCL_VERSION=two"]',
                                  IMAGES[0].read_text()[:300]])
def test_image_garbage(text):
    with pytest.raises(ParseError) as exc:
        nccl_env.image_env(text)
    assert exc.value.tool == "docker image inspect"
