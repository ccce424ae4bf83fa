"""What the object stores' clients raise, as the library's errors named by the user's URL.

:func:`translated` wraps every request of :mod:`~subsetsaver.storage.remote`: a missing object is a
``CheckpointNotFoundError`` (also a ``FileNotFoundError``), a missing client library names the extra to
install, no answer within the retry budget (no connection, a time-out, a stalled server) is one
``StoreUnreachableError`` with the likely causes, and any other refusal is a ``RemoteStorageError`` whose fix
names the credentials the client reads, the bucket, or the network. The server's own HTTP URLs are left out of
messages: the user's ``gs://`` or ``s3://`` URL names the object.

Example::

    with translated("s3", "s3://bucket/run/model.index", "read"):
        data = filesystem.cat_file("s3://bucket/run/model.index")
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import re

from ..errors import CheckpointNotFoundError, RemoteStorageError, StoreUnreachableError, SubsetSaverError
from . import limits

EXTRAS = {"gs": "gcs", "gcs": "gcs", "s3": "s3", "s3a": "s3"}
"""The extra of ``pip install subsetsaver[...]`` that brings each protocol's client."""
CREDENTIALS = {
    "gcs": "gcsfs reads GOOGLE_APPLICATION_CREDENTIALS (a service-account key file), the credentials of "
           "'gcloud auth application-default login', or the metadata server on Google Cloud "
           "(STORAGE_EMULATOR_HOST points it at an emulator); check them and the bucket's permissions",
    "s3": "s3fs (botocore) reads AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (with AWS_SESSION_TOKEN), "
          "AWS_PROFILE and ~/.aws/credentials, or an instance role (AWS_ENDPOINT_URL points it at another "
          "S3-compatible store); check them and the bucket's permissions",
}
ENDPOINTS = {"gcs": "STORAGE_EMULATOR_HOST", "s3": "AWS_ENDPOINT_URL"}
"""The setting that points each client at another server."""
MISSING_BUCKET = "check the bucket's name, or create the bucket first"

_UNREACHABLE = frozenset({  # the clients' own classes for "no connection" or "no answer in time"
    "ClientConnectorError", "ClientConnectionError", "ServerDisconnectedError", "ServerTimeoutError",
    "EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError", "TransportError"})
_TIMEOUTS = frozenset({"ServerTimeoutError", "ConnectTimeoutError", "ReadTimeoutError"})
_HTTP_URL = re.compile(r"https?://\S+")
_CREDENTIAL_SIGNS = ("credential", "forbidden", "accessdenied", "access denied", "invalidaccesskeyid",
                     "signaturedoesnotmatch", "unauthorized", "401", "403", "expiredtoken", "invalid_grant")


def install_fix(protocol) -> str:
    """What to install for URLs of ``protocol``: the extra of Cloud Storage and S3, else fsspec and the
    package of its implementation."""
    extra = EXTRAS.get(protocol)
    if extra:
        return f"install the client library: pip install 'subsetsaver[{extra}]'"
    return (f"install fsspec (pip install fsspec), which serves '{protocol}://' itself or through the package "
            "its documentation names (adlfs for az://, ...)")


@contextlib.contextmanager
def translated(protocol, url, action, absent_is_error=False):
    """Errors of fsspec and the client libraries as the library's, named by ``url``; an absent object is
    ``CheckpointNotFoundError`` unless ``absent_is_error`` (a write's: the bucket is missing)."""
    try:
        yield
    except FileNotFoundError as error:
        if not absent_is_error:
            raise CheckpointNotFoundError(f"no object '{url}'", path=url) from error
        raise RemoteStorageError(f"cannot {action} '{url}': {first_line(error)}", url, MISSING_BUCKET) from error
    except (FileExistsError, SubsetSaverError, concurrent.futures.CancelledError):
        raise
    except ImportError as error:
        raise RemoteStorageError(f"cannot {action} '{url}': {first_line(error)}", url, install_fix(protocol)) from error
    except Exception as error:
        if unreachable(error):
            raise unreachable_error(protocol, url, action) from error
        raise RemoteStorageError(f"cannot {action} '{url}': {first_line(error)}", url,
                                 _fix_for(protocol, error)) from error


def unreachable_error(protocol, url, action) -> StoreUnreachableError:
    endpoint = ENDPOINTS.get(EXTRAS.get(protocol))
    where = f" (check {endpoint} and the network)" if endpoint else ""
    return StoreUnreachableError(
        f"cannot {action} '{url}': no answer from the store within the {limits.current().budget:g} s retry budget",
        url, f"the server is unreachable or stopped sending{where}, the bucket is missing, or the credentials are "
             f"refused; to wait longer, set {limits.ENVIRONMENT['budget']} (seconds)")


def _fix_for(protocol, error):
    text = f"{type(error).__name__} {error} {getattr(error, 'code', '')}".lower()
    if isinstance(error, PermissionError) or any(sign in text for sign in _CREDENTIAL_SIGNS):
        return CREDENTIALS.get(EXTRAS.get(protocol), "check the store's credentials and permissions")
    if "nosuchbucket" in text or "bucket does not exist" in text or "not found" in text:
        return MISSING_BUCKET
    return "check the URL, the network and the store's status, then try again"


def unreachable(error) -> bool:
    """Whether ``error`` says the store did not answer (no connection, a time-out), by its class or a cause's."""
    return any(isinstance(cause, (TimeoutError, ConnectionError)) or _UNREACHABLE & _class_names(cause)
               for cause in _causes(error))


def timed_out(error) -> bool:
    """Whether ``error`` (or a cause) is a time-out: a connect, read or budget time-out."""
    return any(isinstance(cause, TimeoutError) or _TIMEOUTS & _class_names(cause) for cause in _causes(error))


def _causes(error):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _class_names(error) -> set:
    return {kind.__name__ for kind in type(error).__mro__}


def first_line(error):
    """The first line of ``error``, the server's own HTTP URLs left out: the user's URL names the object."""
    text = str(error).strip() or type(error).__name__
    return _HTTP_URL.sub("<the server's URL>", text.splitlines()[0])[:300]
