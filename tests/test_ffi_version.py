"""The guard against handlers compiled for a newer XLA FFI API than the installed jax
speaks (XLA would refuse them and fail the whole backend)."""

import pytest

from jax_flashdwc import _ffi, _jax_flashdwc


def test_installed_header_is_read_and_this_build_is_accepted():
  installed = _ffi.installed_ffi_api_version()
  built = tuple(_jax_flashdwc.xla_ffi_api_version)
  assert installed is not None and len(installed) == 2
  assert built <= installed, (built, installed)


@pytest.mark.parametrize("built, installed", [((0, 4), (0, 4)), ((0, 3), (0, 4)), ((0, 9), None)])
def test_same_or_older_api_passes(built, installed):
  _ffi.check_ffi_api_version(built, installed)


@pytest.mark.parametrize("built, installed", [((0, 5), (0, 4)), ((1, 0), (0, 9))])
def test_newer_api_raises_naming_both_versions_and_the_fix(built, installed):
  with pytest.raises(ImportError, match=rf"API {built[0]}\.{built[1]}.*up to {installed[0]}\.{installed[1]}"
                                        r".*--no-build-isolation"):
    _ffi.check_ffi_api_version(built, installed)
