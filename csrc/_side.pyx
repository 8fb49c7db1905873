"""The side stream of a decoded region in one native pass, in log order: broker registrations,
BrokerRegistrationChangeRecords, Fence/UnfenceBrokerRecords, ProducerIdsRecords,
FeatureLevelRecords, ClientQuotaRecords, ACLs, SCRAM credentials and delegation tokens with their
removals, each applied straight from its row of the decoded columns (kraftlog._metadata's tables)
into the MetadataDelta, without a decoded record or a per-record fields dict.

Pure twin: kraftlog.engine.image.side_pure (chosen in engine/image/side.py, which also builds the
arguments). The rules stay in Python, defined once: the pass reads each row's scalars and strings
in C and calls the MetadataDelta method that writes that record's state (Kafka's semantics, and
the same methods the generic replay calls):
    BrokerRegistrationChangeRecord  replay_broker_change(id, epoch, fencing, controlled shutdown)
    Fence/UnfenceBrokerRecord       replay_fence(id, epoch, fenced)
    RegisterBrokerRecord            put_broker(BrokerRegistration built here: endpoints, features,
                                    rack, log dirs from the table's flat lists)
    ProducerIdsRecord               replay_producer_ids(next id, broker, epoch)
    FeatureLevelRecord              replay_feature_level(name, level)   (level 0 removes)
    ClientQuotaRecord               replay_client_quota(((type, name), ...), key, value, remove)
    AccessControlEntryRecord        put_acl(id, its fields as a MappingProxyType built here)
    UserScramCredentialRecord       put_scram(name, mechanism, fields)
    DelegationTokenRecord           put_token(token id, fields)
    the removals                    replay_remove_acl / replay_remove_scram / replay_remove_token
The entries built here hold what MetadataDelta.replay_acl / _scram / _token keep (the record's
fields by Kafka's names, with the generic codec's value types: int, str, bytes, uuid.UUID, a
tuple of str for Renewers), so the image is the same whichever path applied a record.

The pass stops at the first record it does not apply and returns where; nothing of that record
is written: a record of another type (RegisterControllerRecord, UnregisterBrokerRecord, ...), one
whose row has extras or a version the columns do not decode (kind_rows then points into
``other``: record_index tells), or one that fails (MetadataReplayError, raised before any write:
an unknown broker, a stale epoch). The loader replays that one on its own (which raises the typed
error, word for word) and calls again from the next.

``tables``: the decoder's tables (kraftlog.engine.records.metadata_columns.ColumnTable) in the
order of engine/image/side.py SIDE_TABLES (broker_changes, fence, broker_registrations,
producer_ids, features, client_quotas, acls, scram, delegation_tokens), each read (its columns by
name, their lengths checked) at the first record of its kind.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint64_t

import uuid as _uuid_module

import numpy as np

from blob cimport blob_bytes as raw
from blob cimport blob_text as text

cdef extern from "Python.h":
    object PyDictProxy_New(object mapping)

IMPLEMENTATION = "native"
_UUID = _uuid_module.UUID

# positions in ``tables`` (engine/image/side.py SIDE_TABLES)
DEF T_BROKER_CHANGES = 0
DEF T_FENCE = 1
DEF T_REGISTRATIONS = 2
DEF T_PRODUCER_IDS = 3
DEF T_FEATURES = 4
DEF T_QUOTAS = 5
DEF T_ACLS = 6
DEF T_SCRAM = 7
DEF T_TOKENS = 8
DEF N_TABLES = 9
# ``rules``, by position: what the pass builds with and what it hands back on
DEF R_BROKER_REGISTRATION = 0  # image.BrokerRegistration
DEF R_ENDPOINT = 1  # image.Endpoint
DEF R_REPLAY_ERROR = 2  # topics.MetadataReplayError
DEF N_RULES = 3
# Kafka's BrokerRegistrationFencingChange values (image.py FENCING_*); the broker_changes table's
# fenced column is -1 none, 0 unfence, 1 fence, its in_controlled_shutdown -1 none, 1 in
DEF FENCING_FENCE = 1
DEF FENCING_NONE = 0
DEF FENCING_UNFENCE = -1


cdef inline int table_of(int16_t api_key) noexcept nogil:
    # apiKey -> its table's position in ``tables``, -1 when the pass does not apply the type
    if api_key == 17:
        return T_BROKER_CHANGES
    if api_key == 7 or api_key == 8:  # Fence / UnfenceBrokerRecord (the fenced column tells)
        return T_FENCE
    if api_key == 0:
        return T_REGISTRATIONS
    if api_key == 15:
        return T_PRODUCER_IDS
    if api_key == 12:
        return T_FEATURES
    if api_key == 14:
        return T_QUOTAS
    if api_key == 18 or api_key == 19:  # (Remove)AccessControlEntryRecord (removed tells)
        return T_ACLS
    if api_key == 11 or api_key == 22:  # (Remove)UserScramCredentialRecord
        return T_SCRAM
    if api_key == 10 or api_key == 26:  # (Remove)DelegationTokenRecord
        return T_TOKENS
    return -1


cdef object uuid_of(const uint64_t[:, ::1] ids, int64_t k):
    # a uint64[2] (most, least significant half) id
    if k < 0 or k >= ids.shape[0] or ids.shape[1] != 2:
        raise IndexError(f"id {k} is not among the {ids.shape[0]}")
    return _UUID(int=(<object>ids[k, 0] << 64) | <object>ids[k, 1])


cdef void entries(const int64_t[::1] ends, int64_t row, int64_t *first, int64_t *end) noexcept:
    # the entries of ``row`` in a table's flat list: ends[row - 1] (0 for row 0) .. ends[row]
    first[0] = ends[row - 1] if row else 0
    end[0] = ends[row]


cdef int check_entries(int64_t first, int64_t end, Py_ssize_t total, str what) except -1:
    if first < 0 or end < first or end > total:
        raise ValueError(f"{what} {first}..{end} run outside the {total} listed")
    return 0


def _u8(column):
    # a bool column as the uint8 a typed memoryview takes
    return np.ascontiguousarray(column).view(np.uint8)


def _ids(column):
    return np.ascontiguousarray(column, dtype=np.uint64)


cdef class _Side:
    # One apply_side_stream call: the delta's writers (bound methods, taken once) and the tables,
    # each taken (and checked) at the first record of its kind.
    cdef object replay_broker_change, replay_fence, put_broker, replay_producer_ids, replay_feature_level
    cdef object replay_client_quota, put_acl, replay_remove_acl, put_scram, replay_remove_scram
    cdef object put_token, replay_remove_token
    cdef object registration_cls, endpoint_cls
    cdef tuple tables
    cdef bint loaded[N_TABLES]
    # every table's record_index and extras, as addresses (a memoryview cannot be an array item),
    # their arrays kept alive by ``keep``
    cdef const int32_t *rec[N_TABLES]
    cdef const uint8_t *extras[N_TABLES]
    cdef Py_ssize_t rows[N_TABLES]
    cdef list keep
    # broker_changes (bc_), fence (fe_)
    cdef const int32_t[::1] bc_id, fe_id
    cdef const int64_t[::1] bc_epoch, fe_epoch
    cdef const int8_t[::1] bc_fenced, bc_ics
    cdef const uint8_t[::1] fe_fenced
    # broker_registrations (rg_)
    cdef const int32_t[::1] rg_id
    cdef const int64_t[::1] rg_epoch, rg_ep_end, rg_ft_end, rg_ld_end
    cdef const uint64_t[:, ::1] rg_inc, rg_ld
    cdef const uint8_t[::1] rg_fenced, rg_ics, rg_zk, rg_rack_null, rg_blob
    cdef const int64_t[::1] rg_rack_off, rg_ep_name_off, rg_ep_host_off, rg_ft_name_off
    cdef const uint16_t[::1] rg_ep_port
    cdef const int16_t[::1] rg_ep_sp, rg_ft_min, rg_ft_max
    # producer_ids (pi_), features (ft_)
    cdef const int32_t[::1] pi_broker
    cdef const int64_t[::1] pi_epoch, pi_next
    cdef const int16_t[::1] ft_level
    cdef const int64_t[::1] ft_name_off
    cdef const uint8_t[::1] ft_blob
    # client_quotas (q_)
    cdef const double[::1] q_value
    cdef const uint8_t[::1] q_remove, q_ent_null, q_key_blob, q_ent_blob
    cdef const int64_t[::1] q_ent_end, q_key_off, q_ent_type_off, q_ent_name_off
    # acls (a_)
    cdef const uint64_t[:, ::1] a_id
    cdef const uint8_t[::1] a_removed, a_blob
    cdef const int8_t[::1] a_rtype, a_ptype, a_op, a_perm
    cdef const int64_t[::1] a_rname_off, a_princ_off, a_host_off
    # scram (s_)
    cdef const uint8_t[::1] s_removed, s_blob
    cdef const int8_t[::1] s_mech
    cdef const int32_t[::1] s_iter
    cdef const int64_t[::1] s_name_off, s_salt_off, s_stored_off, s_server_off
    # delegation_tokens (t_)
    cdef const uint8_t[::1] t_removed, t_blob
    cdef const int64_t[::1] t_issue, t_max, t_exp, t_ren_end, t_owner_off, t_req_off, t_id_off, t_ren_off

    cdef int load(self, int k) except -1:
        if self.loaded[k]:
            return 0
        t = self.tables[k]
        cdef const int32_t[::1] rec = t.record_index
        cdef const uint8_t[::1] extras = _u8(t.extras)
        cdef Py_ssize_t n = rec.shape[0]
        if extras.shape[0] != n:
            raise ValueError(f"{t.kind}: one extras flag per row")
        self.keep.append((rec, extras))
        self.rows[k] = n
        self.rec[k] = &rec[0] if n else NULL
        self.extras[k] = &extras[0] if n else NULL
        cdef list per_row
        if k == T_BROKER_CHANGES:
            self.bc_id, self.bc_epoch = t.broker_id, t.broker_epoch
            self.bc_fenced, self.bc_ics = t.fenced, t.in_controlled_shutdown
            per_row = [self.bc_id.shape[0], self.bc_epoch.shape[0], self.bc_fenced.shape[0], self.bc_ics.shape[0]]
        elif k == T_FENCE:
            self.fe_id, self.fe_epoch, self.fe_fenced = t.broker_id, t.broker_epoch, _u8(t.fenced)
            per_row = [self.fe_id.shape[0], self.fe_epoch.shape[0], self.fe_fenced.shape[0]]
        elif k == T_REGISTRATIONS:
            self.rg_id, self.rg_epoch, self.rg_inc = t.broker_id, t.broker_epoch, _ids(t.incarnation_id)
            self.rg_fenced, self.rg_ics = _u8(t.fenced), _u8(t.in_controlled_shutdown)
            self.rg_zk, self.rg_rack_null = _u8(t.is_migrating_zk_broker), _u8(t.rack_null)
            self.rg_ep_end, self.rg_ft_end, self.rg_ld_end = t.endpoint_end, t.feature_end, t.log_dir_end
            self.rg_blob, self.rg_rack_off = t.broker_blob, t.rack_offsets
            self.rg_ep_name_off, self.rg_ep_host_off = t.endpoint_name_offsets, t.endpoint_host_offsets
            self.rg_ep_port, self.rg_ep_sp = t.endpoint_port, t.endpoint_security_protocol
            self.rg_ft_name_off, self.rg_ft_min, self.rg_ft_max = (t.feature_name_offsets, t.feature_min_version,
                                                                   t.feature_max_version)
            self.rg_ld = _ids(t.log_dirs).reshape(-1, 2)
            per_row = [self.rg_id.shape[0], self.rg_epoch.shape[0], self.rg_inc.shape[0], self.rg_fenced.shape[0],
                       self.rg_ics.shape[0], self.rg_zk.shape[0], self.rg_rack_null.shape[0],
                       self.rg_ep_end.shape[0], self.rg_ft_end.shape[0], self.rg_ld_end.shape[0],
                       self.rg_rack_off.shape[0] - 1]
            if not (self.rg_ep_name_off.shape[0] == self.rg_ep_host_off.shape[0] == self.rg_ep_port.shape[0] + 1
                    == self.rg_ep_sp.shape[0] + 1 and self.rg_ft_name_off.shape[0] == self.rg_ft_min.shape[0] + 1
                    == self.rg_ft_max.shape[0] + 1):
                raise ValueError("every endpoint and feature column must have one value per entry")
        elif k == T_PRODUCER_IDS:
            self.pi_broker, self.pi_epoch, self.pi_next = t.broker_id, t.broker_epoch, t.next_producer_id
            per_row = [self.pi_broker.shape[0], self.pi_epoch.shape[0], self.pi_next.shape[0]]
        elif k == T_FEATURES:
            self.ft_level, self.ft_name_off, self.ft_blob = t.feature_level, t.name_offsets, t.feature_blob
            per_row = [self.ft_level.shape[0], self.ft_name_off.shape[0] - 1]
        elif k == T_QUOTAS:
            self.q_value, self.q_remove, self.q_ent_end = t.value, _u8(t.remove), t.entity_end
            self.q_key_off, self.q_key_blob = t.key_offsets, t.key_blob
            self.q_ent_type_off, self.q_ent_name_off = t.entity_type_offsets, t.entity_name_offsets
            self.q_ent_null, self.q_ent_blob = _u8(t.entity_name_null), t.entity_blob
            per_row = [self.q_value.shape[0], self.q_remove.shape[0], self.q_ent_end.shape[0],
                       self.q_key_off.shape[0] - 1]
            if not self.q_ent_type_off.shape[0] == self.q_ent_name_off.shape[0] == self.q_ent_null.shape[0] + 1:
                raise ValueError("every entity column must have one value per entity")
        elif k == T_ACLS:
            self.a_id, self.a_removed = _ids(t.acl_id), _u8(t.removed)
            self.a_rtype, self.a_ptype, self.a_op, self.a_perm = (t.resource_type, t.pattern_type, t.operation,
                                                                  t.permission_type)
            self.a_rname_off, self.a_princ_off, self.a_host_off = (t.resource_name_offsets, t.principal_offsets,
                                                                   t.host_offsets)
            self.a_blob = t.acl_blob
            per_row = [self.a_id.shape[0], self.a_removed.shape[0], self.a_rtype.shape[0], self.a_ptype.shape[0],
                       self.a_op.shape[0], self.a_perm.shape[0], self.a_rname_off.shape[0] - 1,
                       self.a_princ_off.shape[0] - 1, self.a_host_off.shape[0] - 1]
        elif k == T_SCRAM:
            self.s_removed, self.s_mech, self.s_iter = _u8(t.removed), t.mechanism, t.iterations
            self.s_name_off, self.s_salt_off = t.name_offsets, t.salt_offsets
            self.s_stored_off, self.s_server_off, self.s_blob = t.stored_key_offsets, t.server_key_offsets, t.scram_blob
            per_row = [self.s_removed.shape[0], self.s_mech.shape[0], self.s_iter.shape[0],
                       self.s_name_off.shape[0] - 1, self.s_salt_off.shape[0] - 1, self.s_stored_off.shape[0] - 1,
                       self.s_server_off.shape[0] - 1]
        else:
            self.t_removed, self.t_issue, self.t_max = _u8(t.removed), t.issue_timestamp_ms, t.max_timestamp_ms
            self.t_exp, self.t_ren_end = t.expiration_timestamp_ms, t.renewer_end
            self.t_owner_off, self.t_req_off, self.t_id_off = t.owner_offsets, t.requester_offsets, t.token_id_offsets
            self.t_ren_off, self.t_blob = t.renewer_offsets, t.token_blob
            per_row = [self.t_removed.shape[0], self.t_issue.shape[0], self.t_max.shape[0], self.t_exp.shape[0],
                       self.t_ren_end.shape[0], self.t_owner_off.shape[0] - 1, self.t_req_off.shape[0] - 1,
                       self.t_id_off.shape[0] - 1]
        if any(size != n for size in per_row):
            raise ValueError(f"{t.kind}: every column must have one value per row")
        self.loaded[k] = True
        return 0

    cdef bint whole(self, int k, int64_t row, int64_t i) noexcept:
        # kind_rows points into ``other`` for a version the columns do not decode: record_index tells
        return 0 <= row < self.rows[k] and self.rec[k][row] == i and not self.extras[k][row]

    cdef int apply(self, int k, int64_t row) except -1:
        cdef int8_t fenced
        if k == T_BROKER_CHANGES:
            fenced = self.bc_fenced[row]
            self.replay_broker_change(
                self.bc_id[row], self.bc_epoch[row],
                FENCING_NONE if fenced == -1 else (FENCING_UNFENCE if fenced == 0 else FENCING_FENCE),
                1 if self.bc_ics[row] == 1 else 0)
        elif k == T_FENCE:
            self.replay_fence(self.fe_id[row], self.fe_epoch[row], bool(self.fe_fenced[row]))
        elif k == T_REGISTRATIONS:
            self.put_broker(self.registration(row))
        elif k == T_PRODUCER_IDS:
            self.replay_producer_ids(self.pi_next[row], self.pi_broker[row], self.pi_epoch[row])
        elif k == T_FEATURES:
            self.replay_feature_level(text(self.ft_blob, self.ft_name_off, row), self.ft_level[row])
        elif k == T_QUOTAS:
            self.replay_client_quota(self.entity(row), text(self.q_key_blob, self.q_key_off, row), self.q_value[row],
                                     bool(self.q_remove[row]))
        elif k == T_ACLS:
            self.acl(row)
        elif k == T_SCRAM:
            self.scram(row)
        else:
            self.token(row)
        return 0

    cdef object registration(self, int64_t row):
        # RegisterBrokerRecord (every version: the columns hold a version's missing fields at
        # their defaults, as the generic codec fills them): MetadataDelta.replay_register_broker's
        # registration, built from the row and its slices of the flat lists
        cdef int64_t first, end, e
        entries(self.rg_ep_end, row, &first, &end)
        check_entries(first, end, self.rg_ep_port.shape[0], "endpoints")
        endpoints = tuple([self.endpoint_cls(text(self.rg_blob, self.rg_ep_name_off, e),
                                             text(self.rg_blob, self.rg_ep_host_off, e),
                                             self.rg_ep_port[e], self.rg_ep_sp[e]) for e in range(first, end)])
        entries(self.rg_ft_end, row, &first, &end)
        check_entries(first, end, self.rg_ft_min.shape[0], "features")
        features = tuple([(text(self.rg_blob, self.rg_ft_name_off, e), self.rg_ft_min[e], self.rg_ft_max[e])
                          for e in range(first, end)])
        entries(self.rg_ld_end, row, &first, &end)
        check_entries(first, end, self.rg_ld.shape[0], "log dirs")
        log_dirs = tuple([uuid_of(self.rg_ld, e) for e in range(first, end)])
        return self.registration_cls(
            broker_id=self.rg_id[row], epoch=self.rg_epoch[row], incarnation_id=uuid_of(self.rg_inc, row),
            endpoints=endpoints, supported_features=features,
            rack=None if self.rg_rack_null[row] else text(self.rg_blob, self.rg_rack_off, row),
            fenced=bool(self.rg_fenced[row]), in_controlled_shutdown=bool(self.rg_ics[row]),
            is_migrating_zk_broker=bool(self.rg_zk[row]), log_dirs=log_dirs)

    cdef tuple entity(self, int64_t row):
        # a ClientQuotaRecord's (EntityType, EntityName) pairs: its slice of the flat entity list
        cdef int64_t first, end, e
        entries(self.q_ent_end, row, &first, &end)
        check_entries(first, end, self.q_ent_null.shape[0], "entities")
        return tuple([(text(self.q_ent_blob, self.q_ent_type_off, e),
                       None if self.q_ent_null[e] else text(self.q_ent_blob, self.q_ent_name_off, e))
                      for e in range(first, end)])

    cdef int acl(self, int64_t row) except -1:
        acl_id = uuid_of(self.a_id, row)
        if self.a_removed[row]:
            self.replay_remove_acl(acl_id)
            return 0
        self.put_acl(acl_id, PyDictProxy_New({
            "Id": acl_id, "ResourceType": self.a_rtype[row],
            "ResourceName": text(self.a_blob, self.a_rname_off, row), "PatternType": self.a_ptype[row],
            "Principal": text(self.a_blob, self.a_princ_off, row), "Host": text(self.a_blob, self.a_host_off, row),
            "Operation": self.a_op[row], "PermissionType": self.a_perm[row]}))
        return 0

    cdef int scram(self, int64_t row) except -1:
        name, mechanism = text(self.s_blob, self.s_name_off, row), self.s_mech[row]
        if self.s_removed[row]:
            self.replay_remove_scram(name, mechanism)
            return 0
        self.put_scram(name, mechanism, PyDictProxy_New({
            "Name": name, "Mechanism": mechanism, "Salt": raw(self.s_blob, self.s_salt_off, row),
            "StoredKey": raw(self.s_blob, self.s_stored_off, row),
            "ServerKey": raw(self.s_blob, self.s_server_off, row), "Iterations": self.s_iter[row]}))
        return 0

    cdef int token(self, int64_t row) except -1:
        token_id = text(self.t_blob, self.t_id_off, row)
        if self.t_removed[row]:
            self.replay_remove_token(token_id)
            return 0
        cdef int64_t first, end, e
        entries(self.t_ren_end, row, &first, &end)
        check_entries(first, end, self.t_ren_off.shape[0] - 1, "renewers")
        self.put_token(token_id, PyDictProxy_New({
            "Owner": text(self.t_blob, self.t_owner_off, row), "Requester": text(self.t_blob, self.t_req_off, row),
            "Renewers": tuple([text(self.t_blob, self.t_ren_off, e) for e in range(first, end)]),
            "IssueTimestamp": self.t_issue[row], "MaxTimestamp": self.t_max[row],
            "ExpirationTimestamp": self.t_exp[row], "TokenId": token_id}))
        return 0


def apply_side_stream(delta, tuple tables, tuple rules, const int16_t[::1] api_keys, const int32_t[::1] kind_rows,
                      const int64_t[::1] order, Py_ssize_t start):
    """Apply the side-stream records ``order[start:]`` (record indexes, in log order) to ``delta``
    (a MetadataDelta) from their rows of ``tables`` until the first one not applied (see above);
    returns where that is in ``order`` (len(order) when all were). ``rules``: (BrokerRegistration,
    Endpoint, MetadataReplayError)."""
    cdef Py_ssize_t n = order.shape[0], pos = start
    if not 0 <= start <= n:
        raise ValueError(f"start {start} is outside the {n} records")
    if len(tables) != N_TABLES or len(rules) != N_RULES:
        raise ValueError("9 tables and 3 rules")
    if api_keys.shape[0] != kind_rows.shape[0]:
        raise ValueError("api_keys and kind_rows go together")
    cdef _Side s = _Side.__new__(_Side)
    s.tables, s.keep = tables, []
    s.registration_cls, s.endpoint_cls = rules[R_BROKER_REGISTRATION], rules[R_ENDPOINT]
    replay_error = rules[R_REPLAY_ERROR]
    s.replay_broker_change, s.replay_fence, s.put_broker = (delta.replay_broker_change, delta.replay_fence,
                                                            delta.put_broker)
    s.replay_producer_ids, s.replay_feature_level = delta.replay_producer_ids, delta.replay_feature_level
    s.replay_client_quota, s.put_acl, s.replay_remove_acl = (delta.replay_client_quota, delta.put_acl,
                                                             delta.replay_remove_acl)
    s.put_scram, s.replay_remove_scram = delta.put_scram, delta.replay_remove_scram
    s.put_token, s.replay_remove_token = delta.put_token, delta.replay_remove_token
    cdef int64_t i, row
    cdef int k
    while pos < n:
        i = order[pos]
        if i < 0 or i >= api_keys.shape[0]:
            break
        k = table_of(api_keys[i])
        if k < 0:
            break
        s.load(k)
        row = kind_rows[i]
        if not s.whole(k, row, i):
            break
        try:
            s.apply(k, row)
        except replay_error:
            break  # raised before any write (an unknown broker, a stale epoch): the loader reports it
        pos += 1
    return pos
