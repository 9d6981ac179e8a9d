"""hostctl.core is pure: it imports none of pyroute2, bcc, zmq, psutil and no other hostctl package but errors."""

import subprocess
import sys

CODE = r"""
import sys, importlib, pkgutil
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('pyroute2', 'bcc', 'zmq', 'psutil'):
            raise ImportError('core must not import ' + name)
sys.meta_path.insert(0, Block())
import hostctl.core
for m in pkgutil.walk_packages(hostctl.core.__path__, 'hostctl.core.'):
    importlib.import_module(m.name)
bad = sorted(n for n in sys.modules if n.startswith('hostctl.') and not n.startswith('hostctl.core')
             and n not in ('hostctl.errors',))
assert not bad, bad
print('ok')
"""


def test_core_imports_nothing_impure():
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
