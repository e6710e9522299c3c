-- POROUS dissector for Wireshark and tshark: wire version 2, plain and secure mode.
--
-- The format is docs/wire-format.md (its field tables are the LAYOUT tables below, and
-- `cargo test -p porous-proto --test dissector` fails if the two differ); the code in
-- porous-proto/src/wire/ is the truth both follow.
--
-- Use it for one run:      wireshark -X lua_script:tools/wireshark/porous.lua FILE
--                          tshark -X lua_script:tools/wireshark/porous.lua -r FILE -V
-- or install it for good:  cp tools/wireshark/porous.lua ~/.local/lib/wireshark/plugins/
--                          (Windows: %APPDATA%\Wireshark\plugins\; Help > About >
--                          Folders names the personal Lua plugins folder of a version)
--
-- Registration: a heuristic on UDP (on by default; Analyze > Enabled Protocols,
-- "porous_udp"). A POROUS connection starts with a connection request, which is
-- recognised by its check (plain mode) or its layout (secure mode); every later datagram
-- between the same two endpoints is POROUS. For a capture that starts mid-connection,
-- name the ports: the preference "porous.ports" (tshark -o porous.ports:9000) or Decode
-- As > UDP port > POROUS. Written for Wireshark 3.6 and later (Lua 5.2 to 5.4); tested
-- with tshark 4.0 (Debian 12).
--
-- What it shows: the type byte's flags; the handshake's every field; a data datagram's
-- frame id, pings, acknowledgement ranges and delay, and each message's kind, channel,
-- packet id, dependency, fragment index and count (in granules: the first granule the
-- payload covers, and the packet's length in granules), length and payload. Truncated ids
-- (frame ids, the newest acknowledged id, 16-bit packet ids) are shown as sent and
-- expanded to their full values, as the receiver does: from the ids of the same
-- direction seen before (the handshake gives the first ones). The check is verified
-- wherever its key can be known from the capture: always for a connection request, and
-- for replies and connection datagrams once the capture holds the handshake's
-- datagrams that carry the two nonces (porous.check.status: 1 good, 2 bad, 0 not
-- verifiable). A good check also proves the expansion right: the full values enter it.
-- In secure mode only the clear fields are shown (type byte, counter or salt, a
-- request's token and nonce); the rest is sealed (ChaCha20-Poly1305) and marked so.

-- Bit operations: Lua 5.2's bit32, else Wireshark's LuaBitOp, else Lua 5.3+'s operators
-- (loaded from a string, so that older parsers never see them).
local bit = bit32 or bit or load([[return {
  band = function(a, b) return a & b end,
  bxor = function(a, b) return a ~ b end,
  bnot = function(a) return ~a & 0xFFFFFFFF end,
  lshift = function(a, n) return (a << n) & 0xFFFFFFFF end,
  rshift = function(a, n) return (a & 0xFFFFFFFF) >> n end,
}]])()

local porous = Proto("porous", "POROUS")

-- ---- the layouts of docs/wire-format.md --------------------------------------------------
-- Each table below is the one the document marks `<!-- layout:NAME -->`, entry for
-- entry: { the field's name, its type } as the document writes them, in its order (the
-- code that reads each layout follows the same order). porous-proto/tests/dissector.rs
-- compares the two, so a field added, removed, renamed or resized on one side only fails
-- `cargo test`.

local LAYOUT = {}

LAYOUT.request = {
  { "nonce", "u32" },
  { "frame_base", "u32" },
  { "packet_base", "u24" },
  { "app_version", "u32" },
  { "channels", "u8" },
  { "mtu", "varint" },
  { "max_packet", "varint" },
  { "bandwidth_in", "varint" },
  { "bandwidth_out", "varint" },
  { "flags", "u8" },
  { "cookie", "16 B" },
  { "data_len", "varint" },
  { "data", "data_len B" },
  { "unordered", "bitmap" },
  { "padding", "zeros" },
}

LAYOUT.connection = {
  { "type", "u8" },
  { "frame id", "w+1 B" },
  { "ping", "u8" },
  { "ping ack", "u8" },
  { "ack section", "ack" },
  { "messages", "messages" },
  { "padding", "zeros" },
  { "check", "u32" },
}

LAYOUT.ack = {
  { "head", "u8" },
  { "largest", "u16" },
  { "delay", "varint" },
  { "len_0 - 1", "varint" },
  { "gap - 1", "varint" },
  { "len - 1", "varint" },
}

-- After the header byte (read through its bits: kind, N, W, dep, F, L or sub).
LAYOUT.message = {
  { "channel", "u8" },
  { "packet id", "u16 or u24" },
  { "dependency", "varint" },
  { "fragment index", "varint" },
  { "count - 2", "varint" },
  { "length", "varint" },
  { "payload", "bytes" },
}

LAYOUT.sealed_request = {
  { "type", "u8" },
  { "token_len", "u16" },
  { "server part", "token_len B" },
  { "nonce", "u32" },
  { "counter", "u32" },
  { "body", "sealed" },
  { "tag", "16 B" },
}

LAYOUT.sealed_reply = {
  { "type", "u8" },
  { "salt", "u64" },
  { "body", "sealed" },
  { "tag", "16 B" },
}

-- A sealed moved (0x8B): the id and cookie in the clear, all but the tag associated data.
LAYOUT.sealed_moved = {
  { "type", "u8" },
  { "id", "u32" },
  { "cookie", "8 B" },
  { "counter", "u32" },
  { "tag", "16 B" },
}

LAYOUT.sealed_connection = {
  { "type", "u8" },
  { "counter", "u32" },
  { "body", "sealed" },
  { "digest", "u32" },
  { "tag", "16 B" },
}

-- The server part of a connect token, as a sealed request carries it.
LAYOUT.token_server = {
  { "expires", "u64" },
  { "nonce", "24 B" },
  { "sealed", "sealed" },
  { "tag", "16 B" },
}

-- Bodies of the control datagrams other than requests: type -> fields.
LAYOUT.bodies = {
  [0x82] = {},
  [0x83] = { { "acked", "u32" } },
  [0x84] = { { "reason", "u8" }, { "detail", "varint" } },
  [0x85] = { { "cookie", "16 B" } },
  [0x86] = { { "code", "varint" } },
  [0x87] = {},
  [0x88] = { { "data", "u64" } },
  [0x89] = { { "data", "u64" } },
  [0x8A] = { { "cookie", "8 B" } },
  [0x8B] = { { "id", "u32" }, { "cookie", "8 B" } },
}

-- Type byte -> { datagram, key }.
LAYOUT.types = {
  [0x80] = { "connection request", "version" },
  [0x81] = { "connection request that acknowledges the receiver's request", "reply" },
  [0x82] = { "connection acknowledgement", "reply" },
  [0x83] = { "acknowledgement of another connection id", "reply" },
  [0x84] = { "refusal", "reply" },
  [0x85] = { "challenge (cookie)", "reply" },
  [0x86] = { "disconnection request", "connection" },
  [0x87] = { "disconnection acknowledgement", "connection" },
  [0x88] = { "path challenge", "connection" },
  [0x89] = { "path response", "connection" },
  [0x8A] = { "unknown path", "version" },
  [0x8B] = { "moved", "connection" },
}

-- Refusal reason -> { why, what the detail is }.
LAYOUT.refusals = {
  [1] = { "app version", "the refuser's app version" },
  [2] = { "channel count", "the refuser's channel count" },
  [3] = { "datagram size", "the refuser's minimum" },
  [4] = { "host full", "0" },
  [5] = { "not accepting", "0" },
  [6] = { "rejected by the application", "its code (any u32)" },
  [7] = { "unordered channels differ", "the lowest channel that differs" },
}

-- ---- constants ------------------------------------------------------------------------------

local WIRE_VERSION = 2
local CHECK_LEN = 4
local REQUEST_SIZE = 64
local COOKIE_LEN = 16
local PATH_COOKIE_LEN = 8
local MAX_CONNECT_DATA = 256
local MIN_MTU, MAX_MTU = 128, 65507
local TAG_LEN = 16
local SEALED_REQUEST_SIZE = 128
local MAX_REQUEST_BODY = 160
local ACK_DELAY_UNIT_US = 32
local MAX_GRANULES = 2097152
local PACKET_WINDOW = 65536
local FRAME_WINDOW = 65536
local TWO32 = 4294967296
local TWO24 = 16777216

local KIND_NAMES = { [0] = "reliable", [1] = "unreliable", [2] = "passive" }

-- ---- fields ---------------------------------------------------------------------------------

local type_names = {}
for t, v in pairs(LAYOUT.types) do type_names[t] = v[1] end
-- Connection datagrams: what the flags of each valid type byte announce.
for t = 2, 0x7E, 2 do
  if not (bit.band(t, 0x40) == 0 and bit.band(t, 0x30) ~= 0) then
    local parts = {}
    if bit.band(t, 0x40) ~= 0 then parts[#parts + 1] = "data frame" end
    if bit.band(t, 0x08) ~= 0 then parts[#parts + 1] = "acks" end
    if bit.band(t, 0x04) ~= 0 then parts[#parts + 1] = "ping" end
    if bit.band(t, 0x02) ~= 0 then parts[#parts + 1] = "ping ack" end
    if #parts > 0 then type_names[t] = table.concat(parts, " + ") end
  end
end
local refuse_names = {}
for r, v in pairs(LAYOUT.refusals) do refuse_names[r] = v[1] end

local f = {
  type = ProtoField.uint8("porous.type", "Type", base.HEX, type_names),
  family = ProtoField.string("porous.family", "Datagram"),
  t_d = ProtoField.bool("porous.type.data", "D: a data frame", 8, nil, 0x40),
  t_ww = ProtoField.uint8("porous.type.frame_id_bytes", "ww: frame id bytes - 1", base.DEC, nil, 0x30),
  t_a = ProtoField.bool("porous.type.acks", "A: acknowledgements", 8, nil, 0x08),
  t_p = ProtoField.bool("porous.type.ping", "P: ping", 8, nil, 0x04),
  t_q = ProtoField.bool("porous.type.ping_ack", "Q: ping acknowledgement", 8, nil, 0x02),
  t_z = ProtoField.bool("porous.type.padded", "Z: padding follows (a path MTU probe)", 8, nil, 0x01),
  probe_padding = ProtoField.bytes("porous.padding", "Padding"),
  secure = ProtoField.bool("porous.secure", "Secure mode (sealed)"),
  guessed = ProtoField.bool("porous.secure.assumed", "Secure mode assumed: no handshake in the capture, and not plain"),
  -- connection datagrams
  frame_id = ProtoField.uint32("porous.frame_id", "Frame id"),
  frame_id_sent = ProtoField.uint32("porous.frame_id.sent", "Frame id as sent (low bytes)", base.HEX),
  ping = ProtoField.uint8("porous.ping", "Ping"),
  ping_ack = ProtoField.uint8("porous.ping_ack", "Ping acknowledgement"),
  ack = ProtoField.none("porous.ack", "Acknowledgements"),
  ack_head = ProtoField.uint8("porous.ack.head", "Head", base.HEX),
  ack_count = ProtoField.uint8("porous.ack.count", "Ranges"),
  ack_delayed = ProtoField.bool("porous.ack.delayed", "A delay follows", 8, nil, 0x40),
  ack_largest = ProtoField.uint32("porous.ack.largest", "Newest acknowledged frame id"),
  ack_largest_sent = ProtoField.uint16("porous.ack.largest.sent", "Newest acknowledged, as sent (low 16 bits)", base.HEX),
  ack_delay = ProtoField.uint32("porous.ack.delay", "Delay (32 us units)"),
  ack_delay_us = ProtoField.uint32("porous.ack.delay_us", "Delay (us)"),
  ack_range = ProtoField.string("porous.ack.range", "Range"),
  ack_first = ProtoField.uint32("porous.ack.first", "First"),
  ack_last = ProtoField.uint32("porous.ack.last", "Last"),
  ack_gap = ProtoField.uint32("porous.ack.gap_minus_1", "Gap - 1"),
  ack_len = ProtoField.uint32("porous.ack.len_minus_1", "Length - 1"),
  -- messages
  msg = ProtoField.none("porous.msg", "Message"),
  msg_header = ProtoField.uint8("porous.msg.header", "Header", base.HEX),
  msg_kind_bits = ProtoField.uint8("porous.msg.kind_bits", "Kind", base.DEC,
    { [0] = "reliable", [1] = "unreliable", [2] = "passive", [3] = "control" }, 0xC0),
  msg_n = ProtoField.bool("porous.msg.n", "N: channel and packet id follow", 8, nil, 0x20),
  msg_w = ProtoField.bool("porous.msg.w", "W: the id is 24 bits", 8, nil, 0x10),
  msg_dep_code = ProtoField.uint8("porous.msg.dep_code", "Dependency code", base.DEC,
    { [0] = "none", [1] = "distance 1", [2] = "the previous message's target", [3] = "explicit" }, 0x0C),
  msg_f = ProtoField.bool("porous.msg.f", "F: fragment fields follow", 8, nil, 0x02),
  msg_l = ProtoField.bool("porous.msg.l", "L: a length follows", 8, nil, 0x01),
  msg_sub = ProtoField.uint8("porous.msg.sub", "Control", base.DEC,
    { [0] = "sentinel", [1] = "window acknowledgement" }, 0x03),
  msg_kind = ProtoField.string("porous.msg.kind", "Kind"),
  msg_channel = ProtoField.uint8("porous.msg.channel", "Channel"),
  msg_id = ProtoField.uint32("porous.msg.id", "Packet id"),
  msg_id_sent = ProtoField.uint32("porous.msg.id.sent", "Packet id as sent", base.HEX),
  msg_dependency = ProtoField.uint32("porous.msg.dependency", "Dependency (distance back)"),
  msg_frag_index = ProtoField.uint32("porous.msg.fragment.index", "Fragment index (first granule)"),
  msg_frag_count = ProtoField.uint32("porous.msg.fragment.count", "Fragment count (granules of the packet)"),
  msg_length = ProtoField.uint32("porous.msg.length", "Length"),
  msg_payload = ProtoField.bytes("porous.msg.payload", "Payload"),
  -- check
  check = ProtoField.uint32("porous.check", "Check", base.HEX),
  check_status = ProtoField.uint8("porous.check.status", "Check status", base.DEC,
    { [0] = "not verifiable (no key in the capture)", [1] = "good", [2] = "bad" }),
  check_key = ProtoField.string("porous.check.key", "Keyed with"),
  -- control datagrams
  req = ProtoField.none("porous.request", "Request"),
  nonce = ProtoField.uint32("porous.request.nonce", "Nonce", base.HEX),
  frame_base = ProtoField.uint32("porous.request.frame_base", "First frame id"),
  packet_base = ProtoField.uint32("porous.request.packet_base", "First packet id"),
  app_version = ProtoField.uint32("porous.request.app_version", "Application version"),
  channels = ProtoField.uint8("porous.request.channels", "Channels"),
  mtu = ProtoField.uint32("porous.request.mtu", "Largest datagram"),
  max_packet = ProtoField.uint32("porous.request.max_packet", "Largest packet"),
  bandwidth_in = ProtoField.uint32("porous.request.bandwidth_in", "Incoming bandwidth (B/s, 0: no limit)"),
  bandwidth_out = ProtoField.uint32("porous.request.bandwidth_out", "Outgoing bandwidth (B/s, 0: no limit)"),
  flags = ProtoField.uint8("porous.request.flags", "Flags", base.HEX),
  flag_cookie = ProtoField.bool("porous.request.flags.cookie", "A cookie follows", 8, nil, 0x01),
  flag_data = ProtoField.bool("porous.request.flags.data", "Connect data follows", 8, nil, 0x02),
  flag_unordered = ProtoField.bool("porous.request.flags.unordered", "The unordered channels follow", 8, nil, 0x04),
  cookie = ProtoField.bytes("porous.cookie", "Cookie"),
  data_len = ProtoField.uint32("porous.request.data_len", "Connect data length"),
  data = ProtoField.bytes("porous.request.data", "Connect data"),
  unordered = ProtoField.bytes("porous.request.unordered", "Unordered channels (bitmap)"),
  unordered_list = ProtoField.string("porous.request.unordered.channels", "Unordered channels"),
  padding = ProtoField.bytes("porous.request.padding", "Padding"),
  acked = ProtoField.uint32("porous.acked", "Connection id held", base.HEX),
  reason = ProtoField.uint8("porous.refuse.reason", "Reason", base.DEC, refuse_names),
  detail = ProtoField.uint32("porous.refuse.detail", "Detail"),
  code = ProtoField.uint32("porous.disconnect.code", "Application's code"),
  path_data = ProtoField.uint64("porous.path.data", "Path challenge value", base.HEX),
  path_cookie = ProtoField.bytes("porous.path.cookie", "Path cookie"),
  path_id = ProtoField.uint32("porous.path.id", "Connection id (the receiver's nonce)", base.HEX),
  -- secure mode
  counter = ProtoField.uint32("porous.sealed.counter", "Counter (low 32 bits)"),
  salt = ProtoField.uint64("porous.sealed.salt", "Salt", base.HEX),
  token_len = ProtoField.uint16("porous.sealed.token_len", "Token's server part length"),
  token = ProtoField.none("porous.token", "Connect token, server part"),
  token_expires = ProtoField.absolute_time("porous.token.expires", "Expires", base.UTC),
  token_nonce = ProtoField.bytes("porous.token.nonce", "Nonce"),
  token_sealed = ProtoField.bytes("porous.token.sealed", "Sealed for the server (XChaCha20-Poly1305)"),
  token_tag = ProtoField.bytes("porous.token.tag", "Tag"),
  sealed_body = ProtoField.bytes("porous.sealed.body", "Sealed (ChaCha20-Poly1305)"),
  tag = ProtoField.bytes("porous.sealed.tag", "Tag"),
}

local fl = {}
for _, v in pairs(f) do fl[#fl + 1] = v end
porous.fields = fl

local e = {
  malformed = ProtoExpert.new("porous.malformed", "Malformed POROUS datagram", expert.group.MALFORMED, expert.severity.ERROR),
  bad_check = ProtoExpert.new("porous.check.bad", "Integrity check failed: corrupted, forged, or a truncated id expanded wrongly",
    expert.group.CHECKSUM, expert.severity.WARN),
  sealed = ProtoExpert.new("porous.sealed", "Sealed: only the connection's keys open it", expert.group.SECURITY, expert.severity.NOTE),
}
porous.experts = { e.malformed, e.bad_check, e.sealed }

porous.prefs.ports = Pref.range("UDP ports", "", "UDP ports always dissected as POROUS (besides the heuristic)", 65535)

-- ---- integers -------------------------------------------------------------------------------

local function u32(x) return x % TWO32 end

-- CRC-32 (IEEE), reflected, as zlib and crc32fast compute it.
local CRC_TABLE = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if bit.band(c, 1) == 1 then c = bit.bxor(0xEDB88320, bit.rshift(c, 1)) else c = bit.rshift(c, 1) end
  end
  CRC_TABLE[i] = c
end

-- A CRC state: the complement of the running register; `crc_update(0, s)` is the CRC of s.
local function crc_update(crc, s)
  local c = bit.bnot(crc)
  for i = 1, #s do
    c = bit.bxor(CRC_TABLE[bit.band(bit.bxor(c, s:byte(i)), 0xFF)], bit.rshift(c, 8))
  end
  return u32(bit.bnot(c))
end

local function le32(v)
  v = u32(v)
  return string.char(v % 256, math.floor(v / 256) % 256, math.floor(v / 65536) % 256, math.floor(v / 16777216) % 256)
end

local MATERIAL = "POROUS" .. string.char(WIRE_VERSION)
local function key_version() return crc_update(0, MATERIAL .. "V") end
local function key_reply(n) return crc_update(0, MATERIAL .. "R" .. le32(n)) end
local function key_connection(s, r) return crc_update(0, MATERIAL .. "C" .. le32(s) .. le32(r)) end

-- Sequence arithmetic, as porous-proto/src/seq.rs: `expand` is the id nearest
-- `reference` in a space of `space` ids with these low `bits`; `expand_below` the newest
-- id below `limit`.
local function expand(t, bits, reference, space)
  local m = 2 ^ bits
  if m >= space then return t % space end
  local delta = (t - reference) % m
  if delta >= m / 2 then return (reference - (m - delta)) % space end
  return (reference + delta) % space
end

local function expand_below(t, bits, limit, space)
  local m = 2 ^ bits
  if m >= space then return t % space end
  local newest = (limit - 1) % space
  return (newest - ((newest - t) % m)) % space
end

-- Whether `a` is after `b` in a space of `space` ids (within half the space).
local function newer(a, b, space)
  local d = (a - b) % space
  return d ~= 0 and d < space / 2
end

-- ---- reading --------------------------------------------------------------------------------

-- A decode error: the field it names and what is wrong.
local Bad = {}
Bad.__index = Bad
local function bad(what) error(setmetatable({ what = what }, Bad), 0) end

local Reader = {}
Reader.__index = Reader

local function reader(tvb, from, to) return setmetatable({ tvb = tvb, pos = from, stop = to }, Reader) end

function Reader:left() return self.stop - self.pos end

function Reader:take(n, field)
  if n < 0 or self.pos + n > self.stop then bad("truncated " .. field) end
  local r = self.tvb:range(self.pos, n)
  self.pos = self.pos + n
  return r
end

function Reader:uint(n, field)
  local r = self:take(n, field)
  if n == 0 then return r, 0 end
  return r, r:le_uint()
end

function Reader:varint(field)
  local from, value = self.pos, 0
  for i = 0, 4 do
    local _, byte = self:uint(1, field)
    value = value + (byte % 128) * 2 ^ (7 * i)
    if byte < 128 then
      if byte == 0 and i > 0 then bad("non-canonical varint in " .. field) end
      if value >= TWO32 then bad(field .. " out of range") end
      return self.tvb:range(from, self.pos - from), value
    end
  end
  bad(field .. " out of range")
end

-- ---- conversations --------------------------------------------------------------------------

-- Per pair of endpoints: each side's handshake parameters and the ids seen from it.
local conversations = {}
-- Per frame number: what the first pass computed (full ids, check status), so a second
-- pass shows the same values without touching the state again.
local frames = {}

-- A new capture file starts with no conversations and no frames.
function porous.init()
  conversations = {}
  frames = {}
end

local function endpoint(addr, port) return tostring(addr) .. "|" .. tostring(port) end

local function conversation(pinfo, create)
  local a, b = endpoint(pinfo.src, pinfo.src_port), endpoint(pinfo.dst, pinfo.dst_port)
  local k = a < b and (a .. "~" .. b) or (b .. "~" .. a)
  local c = conversations[k]
  if not c and create then
    c = { sides = {}, secure = false }
    conversations[k] = c
  end
  return c, a, b
end

local function side(c, who)
  local s = c.sides[who]
  if not s then
    s = { packets = {} }
    c.sides[who] = s
  end
  return s
end

-- ---- the check ------------------------------------------------------------------------------

-- Adds the check (the datagram's last four bytes) and its verification. `key` is the CRC
-- state of the key material or nil; `content` the logical content (a string); `status`
-- a stored verdict on a second pass.
local function add_check(tvb, tree, key, key_name, content, stored)
  local at = tvb:len() - CHECK_LEN
  local check_range = tvb:range(at, CHECK_LEN)
  local item = tree:add_le(f.check, check_range)
  local status = stored
  if status == nil then
    if key == nil then
      status = 0
    elseif crc_update(key, content) == check_range:le_uint() then
      status = 1
    else
      status = 2
    end
  end
  local s = item:add(f.check_status, check_range, status)
  s:set_generated()
  if key_name then item:add(f.check_key, check_range, key_name):set_generated() end
  if status == 2 then item:add_proto_expert_info(e.bad_check) end
  return status
end

-- ---- control datagrams ----------------------------------------------------------------------

local function read_request(r, tree, with_data)
  local p = {}
  local function field(name, fieldf, n)
    local range, v = r:uint(n, name)
    tree:add_le(fieldf, range)
    p[name] = v
  end
  local function var(name, fieldf)
    local range, v = r:varint(name)
    tree:add(fieldf, range, v)
    p[name] = v
  end
  -- LAYOUT.request, in order.
  field("nonce", f.nonce, 4)
  field("frame_base", f.frame_base, 4)
  field("packet_base", f.packet_base, 3)
  field("app_version", f.app_version, 4)
  field("channels", f.channels, 1)
  if p.channels == 0 then bad("channels out of range") end
  var("mtu", f.mtu)
  if p.mtu < MIN_MTU or p.mtu > MAX_MTU then bad("mtu out of range") end
  var("max_packet", f.max_packet)
  if p.max_packet == 0 then bad("max_packet out of range") end
  var("bandwidth_in", f.bandwidth_in)
  var("bandwidth_out", f.bandwidth_out)
  local range, flags = r:uint(1, "flags")
  local fi = tree:add(f.flags, range)
  fi:add(f.flag_cookie, range)
  fi:add(f.flag_data, range)
  fi:add(f.flag_unordered, range)
  local allowed = with_data and 7 or 5
  if bit.band(flags, bit.bnot(allowed)) ~= 0 then bad("reserved bits set in flags") end
  if bit.band(flags, 1) ~= 0 then tree:add(f.cookie, r:take(COOKIE_LEN, "cookie")) end
  p.data_len = 0
  if bit.band(flags, 2) ~= 0 then
    var("data_len", f.data_len)
    if p.data_len < 1 or p.data_len > MAX_CONNECT_DATA then bad("data_len out of range") end
    tree:add(f.data, r:take(p.data_len, "data"))
  end
  p.bitmap = 0
  if bit.band(flags, 4) ~= 0 then
    local n = math.ceil(p.channels / 8)
    local bm = r:take(n, "unordered")
    local it = tree:add(f.unordered, bm)
    local names = {}
    for byte = 0, n - 1 do
      local bits = bm:range(byte, 1):uint()
      for b = 0, 7 do
        if bit.band(bits, bit.lshift(1, b)) ~= 0 then
          local ch = byte * 8 + b
          if ch >= p.channels then bad("unordered out of range") end
          names[#names + 1] = tostring(ch)
        end
      end
    end
    if #names == 0 then bad("unordered out of range") end
    it:add(f.unordered_list, bm, table.concat(names, ", ")):set_generated()
    p.bitmap = n
  end
  return p
end

-- The padding: zeros up to the padded size (plain mode) or up to the tag.
local function read_padding(r, tree)
  if r:left() > 0 then
    local pad = r:take(r:left(), "padding")
    tree:add(f.padding, pad)
    local raw = pad:bytes():raw()
    if raw:find("[^%z]") then bad("non-zero padding") end
  end
end

local function read_body(ty, r, tree)
  -- LAYOUT.bodies
  if ty == 0x83 then
    tree:add_le(f.acked, r:take(4, "acked"))
  elseif ty == 0x84 then
    local range, reason = r:uint(1, "reason")
    tree:add(f.reason, range)
    local drange, detail = r:varint("detail")
    tree:add(f.detail, drange, detail)
    if not LAYOUT.refusals[reason] then bad("refusal reason out of range") end
    if (reason == 4 or reason == 5) and detail ~= 0 then bad("refusal detail out of range") end
    if (reason == 2 or reason == 7) and detail > 255 then bad("refusal detail out of range") end
    return "refused: " .. LAYOUT.refusals[reason][1] .. " (" .. detail .. ")"
  elseif ty == 0x85 then
    tree:add(f.cookie, r:take(COOKIE_LEN, "cookie"))
  elseif ty == 0x86 then
    local range, code = r:varint("code")
    tree:add(f.code, range, code)
    return "code " .. code
  elseif ty == 0x88 or ty == 0x89 then
    local range = r:take(8, "data")
    tree:add_le(f.path_data, range)
    return "data=" .. range:le_uint64():tohex()
  elseif ty == 0x8A then
    tree:add(f.path_cookie, r:take(PATH_COOKIE_LEN, "cookie"))
  elseif ty == 0x8B then
    local range, id = r:uint(4, "id")
    tree:add_le(f.path_id, range)
    tree:add(f.path_cookie, r:take(PATH_COOKIE_LEN, "cookie"))
    return string.format("id=%08x", id)
  end
  return nil
end

local function control_plain(tvb, pinfo, tree, c, from, to, ty, stored)
  local n = tvb:len()
  local r = reader(tvb, 1, n - CHECK_LEN)
  local info = LAYOUT.types[ty][1]
  local key, key_name
  local me, peer = side(c, from), side(c, to)
  if ty == 0x80 or ty == 0x81 then
    if n < REQUEST_SIZE then bad("request not padded to " .. REQUEST_SIZE .. " bytes") end
    local sub = tree:add(f.req, tvb:range(1, n - 1 - CHECK_LEN))
    local p = read_request(r, sub, ty == 0x80)
    if n < REQUEST_SIZE + p.bitmap then bad("request not padded") end
    read_padding(r, sub)
    if ty == 0x80 then
      key, key_name = key_version(), "version"
    elseif peer.nonce then
      key, key_name = key_reply(peer.nonce), string.format("reply to nonce %08x", peer.nonce)
    end
    if not pinfo.visited then
      me.nonce, me.frame_base, me.packet_base, me.channels = p.nonce, p.frame_base, p.packet_base, p.channels
      me.newest_frame, me.packets = nil, {}
      if ty == 0x80 then c.requester = from end
      c.handshake = true
    end
    info = info .. string.format(" nonce=%08x", p.nonce)
    if p.data_len > 0 then info = info .. " with " .. p.data_len .. " bytes of connect data" end
  else
    local more = read_body(ty, r, tree)
    if r:left() > 0 then bad("trailing bytes") end
    if ty == 0x8A then
      key, key_name = key_version(), "version"
    elseif ty <= 0x85 then
      if peer.nonce then key, key_name = key_reply(peer.nonce), string.format("reply to nonce %08x", peer.nonce) end
    elseif me.nonce and peer.nonce then
      key, key_name = key_connection(me.nonce, peer.nonce), "connection"
    end
    if more then info = info .. ", " .. more end
  end
  local status = add_check(tvb, tree, key, key_name, tvb:raw(0, n - CHECK_LEN), stored)
  return info, status
end

-- ---- connection datagrams -------------------------------------------------------------------

-- Decodes the messages of a frame from `r`, expanding 16-bit ids with `ids(channel, t)`,
-- and feeds `piece(upto, full)` each truncated id's full value.
local function read_messages(r, tree, ids, piece, summary, seen)
  local prev = nil
  local count = 0
  while r:left() > 0 do
    local start = r.pos
    local hrange, h = r:uint(1, "header")
    local kind_bits, low = math.floor(h / 64), h % 4
    local kind
    if kind_bits < 3 then
      kind = KIND_NAMES[kind_bits]
    elseif low == 0 then
      kind = "sentinel"
    elseif low == 1 then
      kind = "window ack"
    else
      bad(string.format("unknown message header 0x%02x", h))
    end
    local explicit = bit.band(h, 0x20) ~= 0
    local wide = bit.band(h, 0x10) ~= 0
    local dep_bits = math.floor(h / 4) % 4
    local m = tree:add(f.msg, hrange)
    local hi = m:add(f.msg_header, hrange)
    hi:add(f.msg_kind_bits, hrange)
    hi:add(f.msg_n, hrange)
    hi:add(f.msg_w, hrange)
    hi:add(f.msg_dep_code, hrange)
    if kind_bits < 3 then
      hi:add(f.msg_f, hrange)
      hi:add(f.msg_l, hrange)
    else
      hi:add(f.msg_sub, hrange)
    end
    m:add(f.msg_kind, hrange, kind):set_generated()
    if kind == "window ack" and not (explicit and wide and dep_bits == 0) then bad("window ack out of range") end
    local channel, id
    if explicit then
      local crange, ch = r:uint(1, "channel")
      channel = ch
      m:add(f.msg_channel, crange)
      local irange, t
      if wide then
        irange, t = r:uint(3, "packet id")
        id = t
        m:add(f.msg_id, irange, id)
      else
        irange, t = r:uint(2, "packet id")
        id = ids(channel, t)
        piece(r.pos, id)
        m:add(f.msg_id_sent, irange, t)
        m:add(f.msg_id, irange, id):set_generated()
      end
    else
      if wide then bad("reserved bits set in the message header (W without N)") end
      if not prev then bad("a message continues a run that never started") end
      channel = prev.channel
      id = (prev.id + ((kind == "sentinel") and 0 or 1)) % TWO24
      m:add(f.msg_channel, hrange, channel):set_generated()
      m:add(f.msg_id, hrange, id):set_generated()
    end
    local dependency = 0
    if dep_bits == 1 then
      dependency = 1
    elseif dep_bits == 2 then
      if explicit or not prev or prev.dependency == 0 then bad("dependency continues a run that never started") end
      dependency = prev.dependency + (id - prev.id) % TWO24
      if dependency >= PACKET_WINDOW then bad("dependency out of range") end
    elseif dep_bits == 3 then
      local drange
      drange, dependency = r:varint("dependency")
      if dependency < 2 or dependency >= PACKET_WINDOW then bad("dependency out of range") end
      m:add(f.msg_dependency, drange, dependency)
    end
    if dep_bits ~= 3 then m:add(f.msg_dependency, hrange, dependency):set_generated() end
    local index, fcount, len = 0, 1, 0
    if kind_bits < 3 then
      if bit.band(h, 0x02) ~= 0 then
        local irange, crange
        irange, index = r:varint("fragment index")
        crange, fcount = r:varint("count - 2")
        fcount = fcount + 2
        if fcount > MAX_GRANULES then bad("fragment count out of range") end
        if index >= fcount then bad("fragment index out of range") end
        m:add(f.msg_frag_index, irange, index)
        m:add(f.msg_frag_count, crange, fcount)
      end
      if bit.band(h, 0x01) ~= 0 then
        local lrange
        lrange, len = r:varint("length")
        m:add(f.msg_length, lrange, len)
      else
        len = r:left()
      end
      if len > 0 then m:add(f.msg_payload, r:take(len, "payload")) else r:take(0, "payload") end
    end
    if bit.band(h, 0x02) == 0 or kind_bits == 3 then
      -- Every message is a fragment of its packet: an unfragmented one is 0 of 1.
      m:add(f.msg_frag_index, hrange, 0):set_generated()
      m:add(f.msg_frag_count, hrange, 1):set_generated()
    end
    m:set_len(r.pos - start)
    local label = string.format("%s ch%d #%d", kind, channel, id)
    if fcount > 1 then label = label .. string.format(" [granule %d of %d]", index, fcount) end
    if kind_bits < 3 then label = label .. " (" .. len .. " B)" end
    m:append_text(": " .. label)
    if kind ~= "window ack" then
      prev = { channel = channel, id = id, dependency = dependency }
      local was = seen[channel]
      if not was or newer(id, was, TWO24) then seen[channel] = id end
    end
    count = count + 1
    summary[#summary + 1] = label
  end
  return count
end

-- A plain connection datagram, or a sealed one's clear type byte when `sealed`.
local function type_flags(tree, range)
  local t = tree:add(f.type, range)
  t:add(f.t_d, range)
  t:add(f.t_ww, range)
  t:add(f.t_a, range)
  t:add(f.t_p, range)
  t:add(f.t_q, range)
  t:add(f.t_z, range)
  return t
end

local function data_plain(tvb, pinfo, tree, c, from, to, ty, stored)
  local n = tvb:len()
  local r = reader(tvb, 1, n - CHECK_LEN)
  local me, peer = side(c, from), side(c, to)
  local fresh = stored == nil
  local s = stored or {}
  -- The logical content: the bytes, each truncated field followed by its full value.
  local pieces, done = {}, 0
  local function piece(upto, full)
    pieces[#pieces + 1] = tvb:raw(done, upto - done) .. le32(full)
    done = upto
  end
  local info = {}
  local frame_id
  if bit.band(ty, 0x40) ~= 0 then
    local bytes = math.floor(ty / 16) % 4 + 1
    local range, t = r:uint(bytes, "frame id")
    if fresh then
      local reference = me.newest_frame or me.frame_base or t
      s.frame_id = expand(t, 8 * bytes, reference, TWO32)
    end
    frame_id = s.frame_id
    piece(r.pos, frame_id)
    tree:add(f.frame_id_sent, range, t)
    tree:add(f.frame_id, range, frame_id):set_generated()
    info[#info + 1] = "frame " .. frame_id
  end
  if bit.band(ty, 0x04) ~= 0 then
    local range, p = r:uint(1, "ping")
    tree:add(f.ping, range)
    info[#info + 1] = "ping " .. p
  end
  if bit.band(ty, 0x02) ~= 0 then
    local range, p = r:uint(1, "ping ack")
    tree:add(f.ping_ack, range)
    info[#info + 1] = "ping ack " .. p
  end
  if bit.band(ty, 0x08) ~= 0 then
    local astart = r.pos
    local a = tree:add(f.ack, tvb:range(astart, 1))
    local hrange, head = r:uint(1, "head")
    local hi = a:add(f.ack_head, hrange)
    if head >= 128 then bad("reserved bits set in the ack head") end
    local count = head % 64 + 1
    hi:add(f.ack_count, hrange, count)
    hi:add(f.ack_delayed, hrange)
    local lrange, t = r:uint(2, "largest")
    if fresh then
      local limit = (peer.newest_frame and (peer.newest_frame + 1)) or (peer.frame_base and peer.frame_base + 1) or t + 1
      s.largest = expand_below(t, 16, limit, TWO32)
    end
    local largest = s.largest
    piece(r.pos, largest)
    a:add(f.ack_largest_sent, lrange, t)
    a:add(f.ack_largest, lrange, largest):set_generated()
    if bit.band(head, 0x40) ~= 0 then
      local drange, delay = r:varint("delay")
      if delay == 0 then bad("a zero ack delay written out") end
      a:add(f.ack_delay, drange, delay)
      a:add(f.ack_delay_us, drange, delay * ACK_DELAY_UNIT_US):set_generated()
    end
    local last, span, ranges = largest, 0, {}
    for i = 1, count do
      local grange, gap
      if i > 1 then
        grange, gap = r:varint("gap - 1")
        span = span + gap + 1
        last = (last - gap - 1) % TWO32
      end
      local lenrange, len = r:varint(i == 1 and "len_0 - 1" or "len - 1")
      span = span + len + 1
      if span > FRAME_WINDOW then bad("ack span out of range") end
      local first = (last - len) % TWO32
      local whole = grange and tvb:range(grange:offset(), lenrange:offset() + lenrange:len() - grange:offset()) or lenrange
      local ri = a:add(f.ack_range, whole, first == last and tostring(first) or (first .. "-" .. last))
      if grange then ri:add(f.ack_gap, grange, gap) end
      ri:add(f.ack_len, lenrange, len)
      ri:add(f.ack_first, whole, first):set_generated()
      ri:add(f.ack_last, whole, last):set_generated()
      ranges[#ranges + 1] = first == last and tostring(first) or (first .. "-" .. last)
      last = (first - 1) % TWO32
    end
    a:set_len(r.pos - astart)
    a:append_text(": " .. table.concat(ranges, ", "))
    info[#info + 1] = "ack " .. table.concat(ranges, ",")
  end
  local nmsgs = 0
  local seen = {}
  if frame_id then
    -- Packet ids nearest the newest seen on the channel this way (the handshake's first
    -- id before any); a first pass records them, a second replays them.
    s.ids = s.ids or {}
    local k = 0
    local function ids(channel, t)
      k = k + 1
      if fresh then
        local reference = me.packets[channel] or me.packet_base or t
        s.ids[k] = expand(t, 16, reference, TWO24)
      end
      return s.ids[k]
    end
    local summary = {}
    nmsgs = read_messages(r, tree, ids, piece, summary, seen)
    if nmsgs == 0 then info[#info + 1] = "sentinel frame" end
    for _, m in ipairs(summary) do info[#info + 1] = m end
    s.summary = summary
  elseif bit.band(ty, 0x01) ~= 0 then
    if r:left() == 0 then bad("datagram ends inside the padding") end
    local pad = r:take(r:left(), "padding")
    tree:add(f.probe_padding, pad)
    if pad:raw():find("[^%z]") then bad("non-zero padding") end
    info[#info + 1] = "path MTU probe, " .. n .. " bytes"
  elseif r:left() > 0 then
    bad("trailing bytes")
  end
  pieces[#pieces + 1] = tvb:raw(done, n - CHECK_LEN - done)
  local key
  if me.nonce and peer.nonce then key = key_connection(me.nonce, peer.nonce) end
  s.status = add_check(tvb, tree, key, key and "connection" or nil, table.concat(pieces), s.status)
  if fresh and s.status ~= 2 and frame_id then
    -- Only a datagram that verified (or that nothing can verify) moves the references.
    if not me.newest_frame or newer(frame_id, me.newest_frame, TWO32) then me.newest_frame = frame_id end
    for channel, id in pairs(seen) do
      local was = me.packets[channel]
      if not was or newer(id, was, TWO24) then me.packets[channel] = id end
    end
  end
  return table.concat(info, ", "), s
end

-- ---- secure mode ----------------------------------------------------------------------------

local function sealed_rest(tvb, tree, r)
  local body_len = r:left() - TAG_LEN
  if body_len < 0 then bad("truncated tag") end
  if body_len > 0 then
    local item = tree:add(f.sealed_body, r:take(body_len, "body"))
    item:add_proto_expert_info(e.sealed)
  end
  tree:add(f.tag, r:take(TAG_LEN, "tag"))
  return body_len
end

local function sealed_request(tvb, pinfo, tree, c, from)
  local n = tvb:len()
  local r = reader(tvb, 1, n)
  tree:add(f.secure, tvb:range(0, 1), true):set_generated()
  local lrange, token_len = r:uint(2, "token_len")
  tree:add_le(f.token_len, lrange)
  local tr = reader(tvb, r.pos, r.pos + token_len)
  local token = tree:add(f.token, r:take(token_len, "server part"))
  local erange = tr:take(8, "expires")
  local secs = erange:le_uint64():tonumber()
  token:add(f.token_expires, erange, NSTime.new(secs, 0))
  token:add(f.token_nonce, tr:take(24, "nonce"))
  local sealed_len = tr:left() - TAG_LEN
  if sealed_len < 0 then bad("truncated token") end
  token:add(f.token_sealed, tr:take(sealed_len, "sealed"))
  token:add(f.token_tag, tr:take(TAG_LEN, "tag"))
  local nrange, nonce = r:uint(4, "nonce")
  tree:add_le(f.nonce, nrange)
  local crange, counter = r:uint(4, "counter")
  tree:add_le(f.counter, crange)
  local body = sealed_rest(tvb, tree, r)
  if body > MAX_REQUEST_BODY then bad("sealed request body out of range") end
  if not pinfo.visited then
    c.secure, c.requester, c.handshake = true, from, true
    side(c, from).nonce = nonce
  end
  return string.format("connection request (sealed) nonce=%08x counter=%d, token %d B", nonce, counter, token_len)
end

local function sealed_datagram(tvb, pinfo, tree, c, from, ty)
  local n = tvb:len()
  local r = reader(tvb, 1, n)
  tree:add(f.secure, tvb:range(0, 1), true):set_generated()
  local reply = ty >= 0x81 and ty <= 0x85 and not (ty == 0x82 and c.requester == from)
  local info
  if ty == 0x8B then
    -- LAYOUT.sealed_moved
    local irange, id = r:uint(4, "id")
    tree:add_le(f.path_id, irange)
    tree:add(f.path_cookie, r:take(PATH_COOKIE_LEN, "cookie"))
    local crange, counter = r:uint(4, "counter")
    tree:add_le(f.counter, crange)
    if sealed_rest(tvb, tree, r) ~= 0 then bad("trailing bytes") end
    return string.format("moved (sealed), id=%08x, counter %d", id, counter)
  end
  if reply then
    local srange = r:take(8, "salt")
    tree:add_le(f.salt, srange)
    info = LAYOUT.types[ty][1] .. " (sealed reply)"
  else
    local crange, counter = r:uint(4, "counter")
    tree:add_le(f.counter, crange)
    if ty < 0x80 then
      local parts = {}
      if bit.band(ty, 0x40) ~= 0 then parts[#parts + 1] = "frame (" .. (math.floor(ty / 16) % 4 + 1) .. "-byte id)" end
      if bit.band(ty, 0x08) ~= 0 then parts[#parts + 1] = "acks" end
      if bit.band(ty, 0x04) ~= 0 then parts[#parts + 1] = "ping" end
      if bit.band(ty, 0x02) ~= 0 then parts[#parts + 1] = "ping ack" end
      info = "sealed " .. table.concat(parts, " + ") .. ", counter " .. counter
    else
      info = LAYOUT.types[ty][1] .. " (sealed), counter " .. counter
    end
  end
  sealed_rest(tvb, tree, r)
  return info
end

-- ---- the dissector --------------------------------------------------------------------------

local function plain_request_verifies(tvb)
  local n = tvb:len()
  if n < REQUEST_SIZE or tvb:range(0, 1):uint() ~= 0x80 then return false end
  return crc_update(key_version(), tvb:raw(0, n - CHECK_LEN)) == tvb:range(n - CHECK_LEN, CHECK_LEN):le_uint()
end

local function looks_sealed_request(tvb)
  local n = tvb:len()
  if n < SEALED_REQUEST_SIZE or tvb:range(0, 1):uint() ~= 0x80 then return false end
  local token_len = tvb:range(1, 2):le_uint()
  if token_len < 48 or token_len > 991 then return false end
  local body = n - (1 + 2 + token_len + 4 + 4 + TAG_LEN)
  return body >= 22 and body <= MAX_REQUEST_BODY
end

-- A tree that keeps nothing: for a trial decoding.
local NOWHERE = setmetatable({}, { __index = function() return function(self) return self end end })

-- Without the handshake in the capture, a datagram may be secure mode's: it is read as
-- sealed when it does not decode as plain (a trial on a tree that keeps nothing), and so
-- is every later one between the same endpoints (a plain datagram always decodes; a
-- sealed one decodes as plain only by chance).
local function sealed_without_handshake(tvb, pinfo, c, from, to, ty)
  if c.secure or c.handshake or ty == 0x80 then return false end
  if c.assumed_secure then return true end
  local plain = pcall(function()
    if ty >= 0x80 then
      control_plain(tvb, pinfo, NOWHERE, c, from, to, ty, nil)
    else
      data_plain(tvb, pinfo, NOWHERE, c, from, to, ty, nil)
    end
  end)
  c.assumed_secure = not plain
  return not plain
end

function porous.dissector(tvb, pinfo, tree)
  local n = tvb:len()
  if n < 5 then return 0 end
  pinfo.cols.protocol = "POROUS"
  local root = tree:add(porous, tvb:range(0, n))
  local c, from, to = conversation(pinfo, true)
  local ty = tvb:range(0, 1):uint()
  local stored = frames[pinfo.number]
  if stored == nil and sealed_without_handshake(tvb, pinfo, c, from, to, ty) then
    stored = { guessed_sealed = true }
    frames[pinfo.number] = stored
  end
  local guessed = stored ~= nil and stored.guessed_sealed
  local ok, result = pcall(function()
    if ty >= 0x80 then
      if ty > 0x8B then bad(string.format("unknown datagram type 0x%02x", ty)) end
      root:add(f.type, tvb:range(0, 1))
      if ty == 0x80 and not plain_request_verifies(tvb) and looks_sealed_request(tvb) then
        return sealed_request(tvb, pinfo, root, c, from)
      end
      -- An unknown path is never sealed: its sender knows no connection to seal it with.
      if (c.secure or guessed) and ty ~= 0x80 and ty ~= 0x8A then
        return sealed_datagram(tvb, pinfo, root, c, from, ty)
      end
      local info, status = control_plain(tvb, pinfo, root, c, from, to, ty, stored and stored.status)
      frames[pinfo.number] = { status = status }
      return info
    end
    local t = type_flags(root, tvb:range(0, 1))
    if ty == 0 or ty == 0x01 then bad("a connection datagram carrying nothing") end
    if (bit.band(ty, 0x01) ~= 0 and bit.band(ty, 0x40) ~= 0) or (bit.band(ty, 0x40) == 0 and bit.band(ty, 0x30) ~= 0) then
      bad("reserved bits set in the type byte")
    end
    if c.secure or guessed then return sealed_datagram(tvb, pinfo, root, c, from, ty) end
    local info, s = data_plain(tvb, pinfo, root, c, from, to, ty, stored)
    frames[pinfo.number] = s
    return info
  end)
  if ok then
    if guessed then
      root:add(f.guessed, tvb:range(0, 1), true):set_generated()
      result = result .. " (secure mode assumed: not plain, and no handshake in the capture)"
    end
    pinfo.cols.info = result
  else
    local what = type(result) == "table" and result.what or tostring(result)
    root:add_proto_expert_info(e.malformed, "Malformed: " .. what)
    pinfo.cols.info = "malformed: " .. what
  end
  return n
end

local function heuristic(tvb, pinfo, tree)
  if tvb:len() < 5 then return false end
  if not conversation(pinfo, false) then
    if not (plain_request_verifies(tvb) or looks_sealed_request(tvb)) then return false end
  end
  porous.dissector(tvb, pinfo, tree)
  return true
end

porous:register_heuristic("udp", heuristic)

local udp_port = DissectorTable.get("udp.port")
udp_port:add_for_decode_as(porous)
local registered = ""
function porous.prefs_changed()
  if registered ~= "" then udp_port:remove(registered, porous) end
  registered = porous.prefs.ports
  if registered ~= "" then udp_port:add(registered, porous) end
end
