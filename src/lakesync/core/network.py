"""Which network addresses a user-configured target (a connector's host, a destination's database) may reach (pure).

A gateway admin names hosts; the functions dial them from inside the deployment, where loopback (the Lambda runtime
API), link-local (the instance metadata service), private ranges (the VPC) and the like hold things no admin should
reach. :class:`NetworkPolicy` says which resolved addresses are refused:

* always, whatever the deployment allows: link-local (``169.254.0.0/16``, ``fe80::/10``, which holds the metadata
  services ``169.254.169.254`` and ``169.254.170.2``), the IPv6 metadata address ``fd00:ec2::254``, the unspecified
  addresses, multicast, broadcast and reserved ranges;
* unless the deployment allows them by CIDR (``LAKESYNC_ALLOWED_NETWORKS``, e.g. an RDS in the VPC; ``lakesync local``
  allows loopback): loopback, private (RFC 1918, ``fc00::/7``), shared address space (``100.64.0.0/10``) and the
  other special-purpose ranges Python's :mod:`ipaddress` does not call global.

IPv4-mapped (``::ffff:a.b.c.d``), IPv4-compatible, NAT64 (``64:ff9b::/96``) and 6to4 IPv6 addresses are judged by the
IPv4 address they carry. Plain ``http://`` is refused for API connectors unless the policy allows it (local
development only).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from lakesync.core.errors import ValidationError

__all__ = [
    "LOCAL_DEVELOPMENT",
    "STRICT",
    "ForbiddenTargetError",
    "IPAddress",
    "IPNetwork",
    "NetworkPolicy",
    "literal_address",
    "parse_networks",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_ADDRESSES: Final = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "169.254.170.23", "fd00:ec2::254", "fd00:ec2::23")
)
"""Cloud metadata and credential endpoints (EC2 IMDS, ECS task credentials, EKS pod identity)."""

NEVER_ALLOWED: Final[tuple[IPNetwork, ...]] = tuple(
    ipaddress.ip_network(n)
    for n in ("169.254.0.0/16", "fe80::/10", "0.0.0.0/8", "::/128", "224.0.0.0/4", "ff00::/8", "240.0.0.0/4")
)
"""Ranges no setting can open: link-local (metadata), unspecified/"this network", multicast, reserved/broadcast."""

_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
_LOOPBACK: Final[tuple[IPNetwork, ...]] = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


class ForbiddenTargetError(ValidationError):
    """A connector or destination names a host, address or scheme the deployment does not let it reach (400)."""

    code = "FORBIDDEN_TARGET"


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    packed = int(address)
    if packed >> 32 == 0 and packed > 1:  # IPv4-compatible ::a.b.c.d (deprecated, still routed by some stacks)
        return ipaddress.IPv4Address(packed)
    return None


def _never(address: IPAddress) -> str | None:
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if any(address in network for network in NEVER_ALLOWED if network.version == address.version):
        if address.is_link_local:
            return "a link-local address"
        return "an unspecified, multicast or reserved address"
    return None


def _kind(address: IPAddress) -> str | None:
    """Why a not-never-allowed address is still refused by default, or ``None`` for a public address."""
    if address.is_loopback:
        return "a loopback address"
    if address.is_private:
        return "a private address"
    if not address.is_global:
        return "a special-purpose (non-global) address"
    return None


@dataclass(frozen=True, slots=True)
class NetworkPolicy:
    """Which addresses and schemes user-configured targets may use.

    Attributes:
        allowed: Networks the deployment allows although they are loopback or private (never link-local or
            metadata: :data:`NEVER_ALLOWED` wins).
        allow_http: Whether API connectors may use plain ``http://`` (local development).
    """

    allowed: tuple[IPNetwork, ...] = ()
    allow_http: bool = False

    def refusal(self, address: IPAddress) -> str | None:
        """Why ``address`` may not be dialled (``"a private address"``...), or ``None`` when it may."""
        embedded = _embedded_ipv4(address)
        for candidate in (address, embedded) if embedded is not None else (address,):
            never = _never(candidate)
            if never is not None:
                return never
        judged = embedded if embedded is not None else address
        reason = _kind(judged)
        if reason is None:
            return None
        if any(judged in network for network in self.allowed if network.version == judged.version):
            return None
        return reason

    def check_address(self, address: IPAddress, *, what: str) -> None:
        """Raise unless ``address`` may be dialled.

        Raises:
            ForbiddenTargetError: naming ``what`` and the kind of address (never a credential).
        """
        reason = self.refusal(address)
        if reason is not None:
            raise ForbiddenTargetError(
                f"{what} resolves to {reason} ({address}), which this deployment does not allow "
                "(LAKESYNC_ALLOWED_NETWORKS allows given private networks)"
            )

    def check_scheme(self, scheme: str, *, what: str) -> None:
        """Raise unless ``scheme`` is ``https`` (or ``http`` where the policy allows it).

        Raises:
            ForbiddenTargetError: any other scheme.
        """
        allowed = ("https", "http") if self.allow_http else ("https",)
        if scheme.lower() not in allowed:
            raise ForbiddenTargetError(f"{what} must be an https:// URL")


def literal_address(host: str) -> IPAddress | None:
    """``host`` as an IP address when it is a literal (``10.0.0.1``, ``[::1]``, ``::ffff:127.0.0.1``), else ``None``."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.split("%", 1)[0]  # an IPv6 zone id
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def parse_networks(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    """CIDRs (``10.0.0.0/16``, ``fd12::/48``; a bare address is a /32 or /128) as networks.

    Raises:
        ValueError: a malformed entry, or one overlapping a range no setting may open (link-local, metadata, ...).
    """
    networks: list[IPNetwork] = []
    for entry in entries:
        text = entry.strip()
        if not text:
            continue
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ValueError(f"{text!r} is not a CIDR") from None
        # (A range holding a metadata address, fd00::/8 say, may be allowed: the metadata address itself never is.)
        if any(network.overlaps(n) for n in NEVER_ALLOWED if n.version == network.version):
            raise ValueError(f"{text} overlaps link-local, unspecified, multicast or reserved addresses")
        networks.append(network)
    return tuple(networks)


STRICT: Final = NetworkPolicy()
"""The default: public addresses only, https only."""

LOCAL_DEVELOPMENT: Final = NetworkPolicy(allowed=_LOOPBACK, allow_http=True)
"""What ``lakesync local`` allows besides: loopback, and plain http (never link-local or metadata)."""
