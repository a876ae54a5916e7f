"""The ``skyd check`` line of an API-key provider, the same way for each: a credential that
is missing or refused says which variable or file to set, an API refusal quotes the API, an
unreachable API names the network error; ``probe`` returns the line when the API answers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from skyd.clouds.neocloud.http import APIError
from skyd.errors import CredentialsError


async def api_check(title: str, probe: Callable[[], Awaitable[tuple[bool, str]]], *,
                    api_errors: tuple[type[Exception], ...] = (APIError,),
                    refused: Callable[[Any], str | None] | None = None) -> tuple[bool, str]:
    """``probe()``'s answer, or (False, why). ``refused(e)``: a provider's own line for an
    API error (None: the generic ``<title> API: <error>``)."""
    try:
        return await probe()
    except CredentialsError as e:
        return False, e.message + (f" ({e.hint})" if e.hint else "")
    except api_errors as e:
        return False, (refused(e) if refused else None) or f"{title} API: {e}"
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        return False, f"{title} API unreachable: {type(e).__name__}: {e}"
