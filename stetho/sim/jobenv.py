"""A simulated node's job environments: the container image `docker image inspect` describes
and the environment module `module show` prints, each carrying an NCCL (nccl_env_version).

- Image: the real recorded Config.Env of an NVIDIA CUDA-based image (fixtures/real/14-nccl-env,
  NCCL 2.20.5) with its NCCL lines (NCCL_VERSION, NV_LIBNCCL_*) set to the simulated release;
  a healthy node's image carries the host's NCCL.
- Module: no public `module show` recording of an NCCL module was found, so its output is
  rendered in Environment Modules' layout (the modulefile path between dashed rules, then
  each command: `module-whatis`, `setenv`, `prepend-path`, as `module show` prints them to
  stderr); the probe folds stderr in.

The shims answer for any image or module name (the node has one of each).
"""

from __future__ import annotations

import re
from collections.abc import Callable

IMAGE_ENV = "14-nccl-env/docker-inspect-config-env-vllm-openai-v0.8.5-nccl-2.20.5.json"
RECORDED_NCCL = "2.20.5"

#: docker (and podman) `image inspect --format '{{json .Config.Env}}' IMAGE`: the image's env
#: on one line; anything else is refused as the real tool refuses an unknown command
DOCKER_SHIM = [
    '[ "$1 $2" = "image inspect" ] || { echo "simulated docker: unsupported arguments: $*" >&2;'
    ' exit 125; }', 'exec tr -d "\\n" < "$D/docker-image-env.json"; echo',
]
#: `module show NAME`: the rendered modulefile display, on stderr as Modules prints it
MODULE_SHIM = [
    '[ "$1" = "show" ] || { echo "simulated module: unsupported arguments: $*" >&2; exit 1; }',
    'rule=-------------------------------------------------------------------',
    '{ echo "$rule"; echo "/usr/share/modulefiles/$2:"; echo; cat "$D/module-show.txt"; '
    'echo "$rule"; } >&2',
]


def files(real: Callable[[str], str], image_nccl: str, module_nccl: str) -> dict[str, str]:
    """The shims' data: the image's Config.Env and the module's commands."""
    env = re.sub(r"(NCCL_VERSION=|NV_LIBNCCL_(?:DEV_)?PACKAGE_VERSION=|libnccl2=|"
                 r"libnccl-dev=)" + re.escape(RECORDED_NCCL), rf"\g<1>{image_nccl}",
                 real(IMAGE_ENV))
    root = f"/opt/nvidia/nccl/{module_nccl}"
    module = (f"module-whatis\t{{NVIDIA Collective Communication Library {module_nccl}}}\n"
              f"setenv\t\tNCCL_VERSION {module_nccl}\nsetenv\t\tNCCL_HOME {root}\n"
              f"prepend-path\tLD_LIBRARY_PATH {root}/lib\nprepend-path\tCPATH {root}/include\n")
    return {"docker-image-env.json": env, "module-show.txt": module}
