%% The state of one EC table copy: the record the per-table core (hm_ec_table) and the
%% modules of its steps share (hm_ec_table_apply, _catch_up, _flow, _receive, _restore,
%% _stabilize, _transfer, _write_behind). Internal to the table layer: nothing outside those
%% modules reads it (hm_ec_table:state() is opaque).

%% Timing shared by several steps, in ticks (250 ms at run time).
%% A copy acknowledges at least every ?ACK_EVERY ticks, even with nothing new to say.
-define(ACK_EVERY, 8).
%% a member heard from within this many ticks runs (it acknowledges at least every
%% ?ACK_EVERY): a sync_ec caller stops waiting for one silent longer
%% (hm_ec_table:release_waiters/2), and a copy keeps counting how long it has lacked what
%% one reported (hm_ec_table_catch_up:merge_request/2)
-define(HEARD_TICKS, 2 * ?ACK_EVERY).
%% flow control (hm_ec_table_flow): how many of its own operations a copy lets a member fall
%% behind by, beyond the least it was behind since it was last heard from anew
-define(FLOW_LIMIT, 5000).
%% a member not acknowledging for this long is not waited for (flow control), nor asked
%% for its state (catching up by state)
-define(FLOW_SILENT_TICKS, 2).

%% a state of about this many rows takes a tick to build, send or install: what waits for
%% one waits that much longer for a large table (hm_ec_table_transfer, _catch_up)
-define(ROWS_PER_TICK, 20000).

%% States and snapshots in parts (hm_ec_table_stream, hm_ec_table_transfer): parts sent
%% ahead of the last one the receiver acknowledged; a receiver without a part for
%% ?STALL_TICKS acknowledges what it has again, and gives the transfer up after
%% ?ABANDON_TICKS; the sender forgets one not acknowledged for as long.
-define(WINDOW, 4).
-define(STALL_TICKS, 8).
-define(ABANDON_TICKS, 48).

%% This copy's node, from its broadcast state.
-define(NODE_OF(B), element(1, hm_tcsb:self(B))).

-record(t, {tab :: atom(),
            type :: hm_ec_key:ec_type(),
            policy :: hm_ec_key:policy(),
            record :: {atom(), pos_integer()},
            cookie :: term(),
            store :: hm_ec_store:store(),
            %% whether the store is a disc copy's (fixed for a store: asked once, not per
            %% operation)
            disc = false :: boolean(),
            tcsb :: hm_tcsb:state() | undefined,      % undefined only while new/1 builds it
            tcsb_opts = #{} :: hm_tcsb:opts(),
            status = ready :: ready | {syncing, [hm_tcsb:message()], [node()]},
            %% unstable prwset clears: {Dot, Ts, KeysWhereSettled}
            clears = [] :: [{hm_vv:dot(), hm_vv:vv(), #{term() => true}}],
            stable_seen :: hm_vv:vv() | undefined,
            %% sync_ec callers: Dot => {From, NodesStillToApply}
            waiters = #{} :: #{hm_vv:dot() => {term(), [node()]}},
            hlc = 0 :: integer(),
            %% per member: the last acknowledgement sent there, and the tick it was sent at
            acks_sent = #{} :: #{node() => {term(), non_neg_integer()}},
            %% operations applied that met a concurrent one on their key (policy resolved)
            conflicts = 0 :: non_neg_integer(),
            %% members' operations received here again after they were delivered
            duplicates = 0 :: non_neg_integer(),
            ticks = 0 :: non_neg_integer(),
            %% a disc copy: operations delivered since the store was last synced (its
            %% acknowledgements wait for that: see tick/2)
            unsynced = false :: boolean(),
            events = false :: boolean(),
            %% a CRDT table's type and flavor (hm_ec_crdt), `none' for a set of records
            crdt = none :: none | hm_ec_crdt:spec(),
            %% state and delta CRDT tables: the broadcast epoch (ms), and the updates applied
            %% here since the last one, newest first, sent as one message when it ends
            epoch = 100 :: pos_integer(),
            batch = [] :: [{term(), hm_ec_crdt:payload()}],
            %% CRDT tables, write-behind: the keys whose state here is newer than their row
            %% (marked in the store as such), written when the epoch ends
            unwritten = #{} :: #{term() => hm_crdt:crdt()},
            %% a `crdt_epoch' timer is set
            epoch_set = false :: boolean(),
            %% flow control (hm_ec_table_flow:flow/1): the limit, per member the least it lagged on
            %% this copy's operations since it was last heard from anew, the answers held back
            %% (newest first: caller, dot, tick held at), the members reachable at the last
            %% write or tick
            flow = ?FLOW_LIMIT :: pos_integer() | infinity,
            flow_base = #{} :: #{node() => non_neg_integer()},
            %% what hm_ec_table_flow:flow/1 last found, for as long as nothing but this copy's own
            %% writes changed since (hm_ec_table_flow:flow_check/3): no member holds writers back
            %% while this copy's own sequence number is at most this (0: ask
            %% hm_ec_table_flow:flow/1)
            flow_until = 0 :: non_neg_integer() | infinity,
            held = [] :: [{term(), hm_vv:dot(), non_neg_integer()}],
            up = [] :: [node()],
            %% catching up by state (hm_ec_table_catch_up:merge_request/2): how far behind a member
            %% this copy must be, the member asked and the tick it was asked at, how many times it
            %% caught up so far
            catch_up = infinity :: pos_integer() | infinity,
            merge_req = none :: none | {node(), non_neg_integer()},
            behind = #{} :: #{node() => {non_neg_integer(), hm_vv:vv()}},
            %% the tick this copy last caught up by state at
            merged_at = none :: none | non_neg_integer(),
            %% what the states caught up with delivered (hm_ec_table_stabilize:stabilize/2)
            fold_after = none :: none | hm_vv:vv(),
            %% whether some key may hold operations that neither the log, the metadata, the
            %% keys given up nor `folded' account for: those of a state joined, until it is
            %% folded (a snapshot from a member that could tell its keys brings none)
            %% (hm_ec_table_catch_up:merge_state/2)
            unlisted = false :: boolean(),
            %% the stable vectors folded so far, joined (and what a restored copy had
            %% delivered): every operation this copy forgot from its log is in it
            %% (hm_ec_table_catch_up:merge_state/2)
            folded = #{} :: hm_vv:vv(),
            merges = 0 :: non_neg_integer(),
            %% states built for members that carried only the keys they may lack
            partial_states = 0 :: non_neg_integer(),
            %% per member: the tick this copy last sent it a snapshot, and the ticks of the
            %% first and the last of its requests for one, while it keeps asking
            snapshots_sent = #{} :: #{node() => non_neg_integer()},
            snapshot_asks = #{} :: #{node() => {non_neg_integer(), non_neg_integer()}},
            %% the bound on the log (hm_ec_table_give_up): operations kept for members that
            %% stay unreachable, the keys of those that left it unstable (`all' after a
            %% clear), and per member lacking some of them the tick since which it is and
            %% the tick this copy last sent it its state for them
            log_limit = infinity :: pos_integer() | infinity,
            given_up_keys = #{} :: #{term() => true} | all,
            pushed = #{} :: #{node() => {non_neg_integer(), non_neg_integer() | none}},
            %% states in parts (hm_ec_table_stream): keys per part (`infinity': one message),
            %% whether a part's keys are read when it goes (or all at once), the transfers
            %% being sent (per member), the one being received or joined, and while it is
            %% joined, its delivered vector and the keys joined so far
            part_keys = infinity :: pos_integer() | infinity,
            parts_late = true :: boolean(),
            streams = #{} :: #{node() => hm_ec_table_stream:stream()},
            incoming = none :: hm_ec_table_stream:incoming(),
            ahead = none :: none | {hm_vv:vv(), #{term() => true}},
            %% stabilization in steps (hm_ec_table_stabilize): keys a step folds at most (a
            %% table of records), the keys still to fold and the stable vector they became
            %% stable under, and whether a `fold' continuation is on its way
            fold_keys = infinity :: pos_integer() | infinity,
            fold_todo = [] :: [term()],
            fold_upto = #{} :: hm_vv:vv(),
            fold_set = false :: boolean()}).

-type effects() :: [hm_ec_table:effect()].
