"""A small AWS API proxy in front of a moto server (all on 127.0.0.1).

moto is lenient: it never runs out of capacity and hands out 10.x addresses that are not on
this machine. The proxy adds what tests need, on the real wire protocol:

- ``fail("sts", code)``: GetCallerIdentity is refused with ``code`` (expired credentials);
- ``fail(zone_or_region, code)``: RunInstances aimed at that zone (or any zone of that
  region) is answered with EC2's error XML (``InsufficientInstanceCapacity``,
  ``VcpuLimitExceeded``, ``AuthFailure``...); nothing reaches moto;
- **address rewrite**: every instance in RunInstances / DescribeInstances responses gets
  its private and public address replaced by a loopback address from ``hosts`` (where fake
  SSH hosts listen), one per instance, kept for the instance's life. A response that would
  still carry a non-loopback address is refused (500), so no test can be handed one;
- ImportKeyPair's public key is passed to ``on_key`` (the fake hosts authorize it);
- ``pause_at(point)``: hold the next RunInstances ``before`` it reaches moto or ``after``
  (the instances exist, the client has no answer yet) until ``release()`` -- for ``kill -9``
  tests; the held request still completes after the client is gone;
- pricing GetProducts and Create/DeletePlacementGroup (which moto lacks) are answered
  here (``placement_groups``: those that exist);
- ``calls`` counts requests by action, ``api_s`` sums the time requests spent here
  (``intervals``: when each was in flight).

    proxy = AWSProxy(moto_url, hosts=["127.0.0.2"]).start()   # a thread with its own loop
    os.environ["AWS_ENDPOINT_URL"] = proxy.url
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import re
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from aiohttp import ClientSession, web

POINTS = ("before_run", "after_run")
EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
ADDRESS_TAGS = ("privateIpAddress", "ipAddress", "publicIp", "privateDnsName", "dnsName", "publicDnsName")
PRICES = {"m6i.large": 0.096, "m6i.xlarge": 0.192, "p4d.24xlarge": 32.77, "g5.xlarge": 1.006,
          "c6i.2xlarge": 0.34}

MESSAGES = {
    "InsufficientInstanceCapacity": "We currently do not have sufficient {type} capacity in the Availability Zone you requested ({zone}).",
    "VcpuLimitExceeded": "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the instance bucket that the specified instance type belongs to.",
    "MaxSpotInstanceCountExceeded": "Max spot instance count exceeded",
    "SpotMaxPriceTooLow": "Your Spot request price of 0.01 is lower than the minimum required Spot request fulfillment price.",
    "Unsupported": "Your requested instance type ({type}) is not supported in your requested Availability Zone ({zone}).",
    "AuthFailure": "AWS was not able to validate the provided access credentials",
    "RequestExpired": "Request has expired.",
    "InvalidParameterCombination": "The parameter combination is not supported in {zone}.",
}


def _loopback(s: str) -> bool:
    try:
        return ipaddress.ip_address(s).is_loopback
    except ValueError:
        return False


def error_xml(code: str, message: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID>"
            "</Response>").encode()


def _region_of(req: web.Request) -> str:
    m = re.search(r"Credential=[^/]+/\d+/([^/]+)/", req.headers.get("Authorization", ""))
    return m.group(1) if m else "us-east-1"


class AWSProxy:
    def __init__(self, upstream: str, hosts: list[str] | None = None,
                 on_key: Callable[[str], None] | None = None,
                 on_boot: Callable[[str, str, str], None] | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.hosts = list(hosts or [])
        self.on_key = on_key
        # (address, image id, instance type) of an instance seen for the first time: the fake
        # host behind that address becomes that machine (its GPUs, as its AMI shows them)
        self.on_boot = on_boot
        self.failures: dict[str, str] = {}  # zone or region -> error code
        self.addresses: dict[str, str] = {}  # instance id -> loopback address
        self.calls: Counter[str] = Counter()
        self.api_s = 0.0
        self.intervals: list[tuple[float, float]] = []  # (start, end) wall time of each request
        self.run_requests: list[dict[str, str]] = []  # RunInstances params, in order
        self.placement_groups: set[str] = set()  # made and not deleted (moto has none)
        self.refused: list[tuple[str, str]] = []  # (zone, code) answered with an error
        self._pause: str | None = None
        self.reached = threading.Event()
        self._gate = threading.Event()
        self._gate.set()
        self._next = 0
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None

    # -- knobs ----------------------------------------------------------------------------

    def fail(self, where: str, code: str) -> None:
        self.failures[where] = code

    def clear_failures(self) -> None:
        self.failures.clear()

    def pause_at(self, point: str) -> None:
        assert point in POINTS, point
        self.reached.clear()
        self._gate.clear()
        self._pause = point

    def release(self) -> None:
        self._pause = None
        self._gate.set()

    # -- address mapping ------------------------------------------------------------------

    def address_of(self, instance_id: str) -> str:
        if instance_id not in self.addresses:
            if self.hosts:
                addr = self.hosts[self._next % len(self.hosts)]
            else:  # nothing listens here: a test that does not SSH
                n = self._next + 1
                addr = f"127.1.{n // 250}.{n % 250 + 1}"
            self._next += 1
            self.addresses[instance_id] = addr
        return self.addresses[instance_id]

    def _rewrite(self, body: bytes) -> bytes:
        ET.register_namespace("", EC2_NS)
        root = ET.fromstring(body)
        changed = False
        for item in root.iter():
            if not item.tag.endswith("}item") and item.tag != "item":
                continue
            iid = next((c.text for c in item if c.tag.endswith("instanceId")), None)
            if not iid or not iid.startswith("i-") or not any(c.tag.endswith("}imageId") for c in item):
                continue
            new = iid not in self.addresses
            addr = self.address_of(iid)
            if new and self.on_boot is not None:
                field = {c.tag.rsplit("}", 1)[-1]: c.text or "" for c in item}
                self.on_boot(addr, field.get("imageId", ""), field.get("instanceType", ""))
            for el in item.iter():
                name = el.tag.rsplit("}", 1)[-1]
                if name in ADDRESS_TAGS and el.text:
                    el.text = addr
                    changed = True
        if not changed:
            return body
        out = ET.tostring(root, encoding="utf-8", xml_declaration=True)
        for el in ET.fromstring(out).iter():  # the guarantee: only loopback leaves here
            name = el.tag.rsplit("}", 1)[-1]
            if name in ("privateIpAddress", "ipAddress", "publicIp") and el.text and not _loopback(el.text):
                raise RuntimeError(f"non-loopback address {el.text} would reach the client")
        return out

    # -- the server -----------------------------------------------------------------------

    async def _handle(self, req: web.Request) -> web.StreamResponse:
        t0, w0 = time.perf_counter(), time.time()
        try:
            return await self._serve(req)
        finally:
            self.api_s += time.perf_counter() - t0
            self.intervals.append((w0, time.time()))

    async def _serve(self, req: web.Request) -> web.StreamResponse:
        body = await req.read()
        target = req.headers.get("X-Amz-Target", "")
        if target.endswith("GetProducts"):
            self.calls["GetProducts"] += 1
            return self._products(body)
        form = {k: v[0] for k, v in parse_qs(body.decode(errors="replace")).items()} if body else {}
        action = form.get("Action") or target.rsplit(".", 1)[-1] or "?"
        self.calls[action] += 1
        region = _region_of(req)
        if action == "ImportKeyPair" and self.on_key is not None:
            material = form.get("PublicKeyMaterial", "")
            try:
                self.on_key(base64.b64decode(material).decode())
            except (ValueError, UnicodeDecodeError):
                self.on_key(material)
        if action == "GetCallerIdentity" and "sts" in self.failures:
            code = self.failures["sts"]
            xml = (f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>The security"
                   f" token included in the request is expired</Message></Error><RequestId>{uuid.uuid4()}"
                   "</RequestId></ErrorResponse>")
            return web.Response(status=403, body=xml.encode(), content_type="text/xml")
        if action in ("CreatePlacementGroup", "DeletePlacementGroup"):  # moto lacks them
            name = form.get("GroupName", "")
            (self.placement_groups.add if action.startswith("Create") else self.placement_groups.discard)(name)
            return web.Response(body=(f'<{action}Response xmlns="{EC2_NS}"><requestId>{uuid.uuid4()}'
                                      f"</requestId><return>true</return></{action}Response>").encode(),
                                content_type="text/xml")
        if action == "RunInstances":
            zone = form.get("Placement.AvailabilityZone", "")
            self.run_requests.append(form)
            code = self.failures.get(zone) or self.failures.get(region)
            if code:
                self.refused.append((zone, code))
                msg = MESSAGES.get(code, code).format(type=form.get("InstanceType"), zone=zone)
                status = 401 if code in ("AuthFailure", "RequestExpired") else 400
                return web.Response(status=status, body=error_xml(code, msg), content_type="text/xml")
            if self._pause == "before_run":
                await self._hold()
        status, headers, data = await self._forward(req, body)
        if action == "RunInstances" and self._pause == "after_run":
            await self._hold()
        if action in ("RunInstances", "DescribeInstances") and status == 200:
            try:
                data = self._rewrite(data)
            except RuntimeError as e:
                return web.Response(status=500, text=str(e))
        return web.Response(status=status, body=data, headers=headers)

    async def _hold(self) -> None:
        self.reached.set()
        while not self._gate.is_set():
            await asyncio.sleep(0.02)

    async def _forward(self, req: web.Request, body: bytes) -> tuple[int, dict[str, str], bytes]:
        assert self._session is not None
        headers = {k: v for k, v in req.headers.items() if k.lower() not in ("host", "content-length")}
        async with self._session.request(req.method, self.upstream + req.path_qs, data=body,
                                         headers=headers) as resp:
            data = await resp.read()
            keep = {k: v for k, v in resp.headers.items() if k.lower() in ("content-type", "x-amzn-requestid")}
            return resp.status, keep, data

    def _products(self, body: bytes) -> web.Response:
        import json

        region = "us-east-1"
        try:
            for f in json.loads(body or b"{}").get("Filters") or []:
                if f.get("Field") == "regionCode":
                    region = f.get("Value")
        except ValueError:
            pass
        items = []
        for itype, usd in PRICES.items():
            items.append(json.dumps({
                "product": {"attributes": {"instanceType": itype, "regionCode": region}},
                "terms": {"OnDemand": {"t1": {"priceDimensions": {"d1": {"pricePerUnit": {"USD": str(usd)}}}}}},
            }))
        return web.json_response({"PriceList": items, "FormatVersion": "aws_v1"},
                                 content_type="application/x-amz-json-1.1")

    # -- thread ---------------------------------------------------------------------------

    def start(self) -> AWSProxy:
        self._thread = threading.Thread(target=self._run, daemon=True, name="awsproxy")
        self._thread.start()
        if not self._ready.wait(20):
            raise RuntimeError("AWS proxy did not start")
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        loop.run_until_complete(self._serve_forever())

    async def _serve_forever(self) -> None:
        self._session = ClientSession()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        await self._runner.cleanup()
        await self._session.close()

    def stop(self) -> None:
        self.release()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)


def start_moto() -> tuple[Any, str]:
    """A ThreadedMotoServer on 127.0.0.1 (request logs silenced); (server, url)."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"
