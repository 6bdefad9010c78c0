"""The SPDY/3 header-compression dictionary (draft-mbelshe-httpbis-spdy-00 §2.6.10.1).

Byte-exact copy of moby/spdystream ``spdy/dictionary.go`` (the Go side of every kubelet stream): zlib
streams primed with anything else fail to inflate on the peer. 1,423 bytes, Adler-32 0xE3C6A7C2.
"""

from __future__ import annotations

from typing import Final

SPDY3_DICTIONARY: Final = (
    b"\x00\x00\x00\x07options\x00\x00\x00\x04head\x00\x00\x00\x04post\x00\x00\x00\x03put\x00\x00\x00\x06de"
    b"lete\x00\x00\x00\x05trace\x00\x00\x00\x06accept\x00\x00\x00\x0eaccept-charse"
    b"t\x00\x00\x00\x0faccept-encoding\x00\x00\x00\x0faccept-language\x00"
    b"\x00\x00\raccept-ranges\x00\x00\x00\x03age\x00\x00\x00\x05allow\x00\x00\x00\rauth"
    b"orization\x00\x00\x00\rcache-control\x00\x00\x00\nconnection"
    b"\x00\x00\x00\x0ccontent-base\x00\x00\x00\x10content-encoding\x00\x00\x00\x10"
    b"content-language\x00\x00\x00\x0econtent-length\x00\x00\x00\x10co"
    b"ntent-location\x00\x00\x00\x0bcontent-md5\x00\x00\x00\rcontent"
    b"-range\x00\x00\x00\x0ccontent-type\x00\x00\x00\x04date\x00\x00\x00\x04etag\x00\x00"
    b"\x00\x06expect\x00\x00\x00\x07expires\x00\x00\x00\x04from\x00\x00\x00\x04host\x00\x00\x00\x08i"
    b"f-match\x00\x00\x00\x11if-modified-since\x00\x00\x00\rif-none-"
    b"match\x00\x00\x00\x08if-range\x00\x00\x00\x13if-unmodified-since"
    b"\x00\x00\x00\rlast-modified\x00\x00\x00\x08location\x00\x00\x00\x0cmax-for"
    b"wards\x00\x00\x00\x06pragma\x00\x00\x00\x12proxy-authenticate\x00\x00\x00"
    b"\x13proxy-authorization\x00\x00\x00\x05range\x00\x00\x00\x07referer"
    b"\x00\x00\x00\x0bretry-after\x00\x00\x00\x06server\x00\x00\x00\x02te\x00\x00\x00\x07trail"
    b"er\x00\x00\x00\x11transfer-encoding\x00\x00\x00\x07upgrade\x00\x00\x00\nus"
    b"er-agent\x00\x00\x00\x04vary\x00\x00\x00\x03via\x00\x00\x00\x07warning\x00\x00\x00\x10ww"
    b"w-authenticate\x00\x00\x00\x06method\x00\x00\x00\x03get\x00\x00\x00\x06statu"
    b"s\x00\x00\x00\x06200 OK\x00\x00\x00\x07version\x00\x00\x00\x08HTTP/1.1\x00\x00\x00\x03ur"
    b"l\x00\x00\x00\x06public\x00\x00\x00\nset-cookie\x00\x00\x00\nkeep-alive\x00"
    b"\x00\x00\x06origin1001012012022052063003023033043"
    b"0530630740240540640740840941041141241341"
    b"4415416417502504505203 Non-Authoritative"
    b" Information204 No Content301 Moved Perm"
    b"anently400 Bad Request401 Unauthorized40"
    b"3 Forbidden404 Not Found500 Internal Ser"
    b"ver Error501 Not Implemented503 Service "
    b"UnavailableJan Feb Mar Apr May Jun Jul A"
    b"ug Sept Oct Nov Dec 00:00:00 Mon, Tue, W"
    b"ed, Thu, Fri, Sat, Sun, GMTchunked,text/"
    b"html,image/png,image/jpg,image/gif,appli"
    b"cation/xml,application/xhtml+xml,text/pl"
    b"ain,text/javascript,publicprivatemax-age"
    b"=gzip,deflate,sdchcharset=utf-8charset=i"
    b"so-8859-1,utf-,*,enq=0."
)
