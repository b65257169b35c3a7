%% @doc The format of what EC tables send between nodes and keep on disc, in one place: how a
%% message is put in its envelope, how an envelope is opened and checked, the shapes of the
%% messages the per-table core accepts, and the version of both formats.
%%
%% An envelope is `{hm_ec, Version, Tab, FromNode, Msg, Cookie}': the wire format's version,
%% the table, the sending node, the message and the table instance (Mnesia's creation
%% cookie: a table deleted and created again under the same name is another instance).
%%
%% <h3>Versions, and nodes of two releases side by side</h3>
%% A release reads two wire versions: its own ({@link version/0}) and the one before it
%% (the oldest it accepts, {@link versions/0}); an envelope of any other version, and a
%% foreign message, is dropped and logged, never applied. A message of the older version is
%% brought to this version's shapes when opened ({@link upgrade/2}), and one sent to a
%% cluster that still runs the older release is written in its shapes
%% ({@link downgrade/2}). Which version a node sends is negotiated as Riak negotiates its
%% capabilities: each node announces the versions it reads, and every node sends at the
%% newest version that every member it reaches reads ({@link negotiate/2}, pure; {@link
%% hm_ec_versions} asks the members and keeps the answer). So during a rolling upgrade the
%% cluster speaks the old version until the last old node is gone, then the new one; a
%% member of a release two versions back (that reads neither) is logged, and the others
%% keep their own version with the rest. Version 2 added states in parts (`merge_part'
%% messages, and `parts' in a state), each part read when the state is built; version 3
%% reads each part as it goes, and its last part carries the vector every key of the state
%% is as (`late' in the first part's state); version 4 sends a large snapshot in parts too
%% (`parts' in a snapshot, its last part with the vector, log and clears), and a snapshot
%% may say what its sender folded (`folded', which an older reader ignores).
%%
%% Messages (`Msg') between copies of a table, as {@link hm_ec_table} sends and accepts them:
%% <ul>
%% <li>`{op, Message}', `{ops, [Message]}': operations, `Message' being
%% `{Origin, Timestamp, {async | sync, Key, Op}}' (see {@link is_op_message/1});</li>
%% <li>`{ack, Replica, Delivered, Newest}': what a copy has delivered;</li>
%% <li>`{applied, Dot}': a `sync' operation was applied;</li>
%% <li>`{snapshot_req}', `{snapshot, Snapshot}', `{snapshot_empty}', `{snapshot_none}':
%% state transfer.</li>
%% <li>`{merge_req, Delivered}', `{merge, State}', `{merge_none}': catching up by state
%% (see {@link is_merge/1}); `{merge_part, Id, I, Part}', `{merge_part_ack, Id, I}',
%% `{merge_part_gone, Id}': the parts after the first of a state in parts
%% (see {@link hm_ec_table_stream}).</li>
%% </ul>
%% Every message may be lost: a busy connection drops what is sent on it (the sender does
%% not wait), and retransmission and acknowledgements repair the loss. A state
%% (`{snapshot, Snapshot}', `{merge, State}': {@link is_state_transfer/1}) waits for room
%% instead: it is sent once per request, and its loss would cost the copy that asked
%% seconds before it asks again.
%% On disc (`disc_copies' only) the log table `hm_log_Tab' holds a row `format' with
%% {@link disc_version/0}; a copy whose log carries another version is not restored from it.
-module(hm_ec_wire).

-export([version/0, versions/0, disc_version/0, envelope/4, envelope/5, open/1, upgrade/2,
         downgrade/2, negotiate/2, sending_version/0, set_sending_version/1]).
-export([is_op_message/1, is_op_shape/1, is_ack/1, is_snapshot/1, is_merge/1,
         is_merge_part/2, is_merge_part/3, is_snapshot_part/3, is_state_transfer/1]).
-export_type([versions/0]).

%% This release's wire version, and the oldest it reads and writes (the previous release's).
-define(VERSION, 4).
-define(OLDEST, 3).
-define(DISC_VERSION, 1).

%% `{Oldest, Newest}': the wire versions a node reads and writes.
-type versions() :: {pos_integer(), pos_integer()}.

%% @doc The wire format's version (this release's, the newest it reads).
-spec version() -> pos_integer().
version() -> ?VERSION.

%% @doc The wire versions this release reads and can send: `{Oldest, Newest}'.
-spec versions() -> versions().
versions() -> {?OLDEST, ?VERSION}.

%% @doc The version this node sends at: the one negotiated with the members it reaches
%% ({@link set_sending_version/1}), this release's until then.
-spec sending_version() -> pos_integer().
sending_version() -> persistent_term:get({?MODULE, sending}, ?VERSION).

%% @doc Send at version `V' from now on (one this release reads); {@link hm_ec_versions}
%% calls it when the members' versions change.
-spec set_sending_version(pos_integer()) -> ok.
set_sending_version(V) when V >= ?OLDEST, V =< ?VERSION ->
    case sending_version() of
        V -> ok;
        _ -> persistent_term:put({?MODULE, sending}, V)
    end.

%% @doc The version to send at, given this node's versions (`Own') and its peers': the
%% newest that this node and every peer read, and the peers none of whose versions this
%% node reads (left out: they cannot take part either way).
-spec negotiate(versions(), [{node(), versions()}]) -> {pos_integer(), [node()]}.
negotiate({Oldest, Newest}, Peers) ->
    Apart = lists:sort([N || {N, {O, W}} <- Peers, W < Oldest orelse O > Newest]),
    Common = [W || {N, {_, W}} <- Peers, not lists:member(N, Apart)],
    {lists:min([Newest | Common]), Apart}.

%% @doc The version of the disc log's format.
-spec disc_version() -> pos_integer().
disc_version() -> ?DISC_VERSION.

%% @doc `Msg' of table `Tab' (instance `Cookie') from node `From', in its envelope, at the
%% version this node sends at ({@link sending_version/0}).
-spec envelope(atom(), node(), term(), term()) -> tuple().
envelope(Tab, From, Msg, Cookie) -> envelope(sending_version(), Tab, From, Msg, Cookie).

%% @doc {@link envelope/4} at version `V' (one this release reads), `Msg' in its shapes.
-spec envelope(pos_integer(), atom(), node(), term(), term()) -> tuple().
envelope(V, Tab, From, Msg, Cookie) when V >= ?OLDEST, V =< ?VERSION ->
    {hm_ec, V, Tab, From, downgrade(V, Msg), Cookie}.

%% @doc Open an envelope of a version this release reads: its table, sender, message (in
%% this version's shapes) and table instance, or why it is not one this node reads.
-spec open(term()) -> {ok, atom(), node(), term(), term()} | {error, term()}.
open({hm_ec, V, Tab, From, Msg, Cookie})
  when is_integer(V), V >= ?OLDEST, V =< ?VERSION, is_atom(Tab), is_atom(From) ->
    {ok, Tab, From, upgrade(V, Msg), Cookie};
open({hm_ec, V, _, _, _, _}) when not is_integer(V); V < ?OLDEST; V > ?VERSION ->
    {error, {unsupported_version, V}};
open(_) -> {error, not_an_envelope}.

%% @doc A message of wire version `V' in this version's shapes. Each version that changes a
%% message's shape adds its clause here (and the reverse in {@link downgrade/2}); every
%% message of version 1 is one of version 2.
-spec upgrade(pos_integer(), term()) -> term().
upgrade(_, Msg) -> Msg.

%% @doc A message of this version in the shapes of version `V' (see {@link upgrade/2}).
%% Version 3 reads no snapshot in parts: the first part of one is no snapshot there (the
%% copy that asked asks again), and the table core sends none while the cluster speaks
%% version 3 (hm_ec_table_server).
-spec downgrade(pos_integer(), term()) -> term().
downgrade(3, {snapshot, #{parts := {_, Count}}}) when Count > 1 -> {snapshot_none};
downgrade(_, Msg) -> Msg.

%% @doc Whether a message carries a copy's state (a snapshot, a state to join, a part of one
%% or its acknowledgement): its sender waits for room on a busy connection rather than drop
%% it.
-spec is_state_transfer(term()) -> boolean().
is_state_transfer({snapshot, _}) -> true;
is_state_transfer({merge, _}) -> true;
is_state_transfer({merge_part, _, _, _}) -> true;
is_state_transfer({merge_part_ack, _, _}) -> true;   % the next parts wait for it
is_state_transfer(_) -> false.

%% @doc Whether a term is an operation message: an origin `{Node, Incarnation}', a version
%% vector with a positive entry for the origin, and a payload `{async | sync, Key, Op}'
%% whose `Op' is a write of a record with its hybrid clock, a delete, a delete_object of a
%% record, a clear, or a CRDT table's payload (see {@link hm_ec_crdt}).
-spec is_op_message(term()) -> boolean().
is_op_message(Msg) -> is_op_shape(Msg) andalso hm_causal_buffer:is_message(Msg).

%% @doc {@link is_op_message/1} but for the counters of the message's vector: its origin, a
%% map for its vector, and its payload. Causal delivery checks the counters of the messages
%% it takes on arrival ({@link hm_tcsb:receive_ready/2}); the others are checked with
%% {@link hm_causal_buffer:is_message/1}.
-spec is_op_shape(term()) -> boolean().
is_op_shape({{N, _}, Ts, {Mode, _Key, Op}}) when is_atom(N), is_map(Ts) ->
    (Mode =:= async orelse Mode =:= sync) andalso is_op(Op);
is_op_shape(_) -> false.

is_op({write, Rec, {H, N}}) -> is_tuple(Rec) andalso is_integer(H) andalso is_atom(N);
is_op(delete) -> true;
is_op({delete_object, Rec}) -> is_tuple(Rec);
is_op(clear) -> true;
is_op({crdt, {Kind, _}}) -> Kind =:= op orelse Kind =:= event orelse Kind =:= batch;
is_op(_) -> false.

%% @doc Whether a term is an acknowledgement.
-spec is_ack(term()) -> boolean().
is_ack({ack, {N, _}, V, Newest}) -> is_atom(N) andalso is_map(V) andalso is_map(Newest);
is_ack(_) -> false.

%% @doc Whether a term is a state transfer's snapshot: rows, metadata rows, the delivered
%% vector, the logged operations and the unstable clears, and (when its sender could tell
%% the keys a member may lack) `folded', the vector of the operations it forgot from its
%% log; or the first part of a snapshot in
%% parts, `{Key, Rows}' and metadata rows as a part of a state (see {@link is_merge_part/2})
%% with `parts => {Id, Count}'.
-spec is_snapshot(term()) -> boolean().
is_snapshot({snapshot, #{parts := {_, Count}, rows := KeyRows, meta := Meta}}) ->
    is_integer(Count) andalso Count > 1 andalso is_merge_part(KeyRows, Meta);
is_snapshot({snapshot, S = #{rows := Rows, meta := Meta, delivered := V, log := L,
                             clears := Cs}}) ->
    is_list(Rows) andalso is_list(Meta) andalso is_map(V) andalso is_list(L) andalso is_list(Cs)
        andalso is_vv(maps:get(folded, S, #{}), 0);
is_snapshot(_) -> false.

%% @doc Whether the last part of a snapshot in parts is one: its keys as a part of a state
%% (see {@link is_merge_part/2}), and the delivered vector, logged operations and unstable
%% clears every key of the snapshot is as.
-spec is_snapshot_part(term(), term(), term()) -> boolean().
is_snapshot_part(KeyRows, Meta, Tail = #{delivered := _, log := _, clears := _}) ->
    is_merge_part(KeyRows, Meta) andalso is_snapshot({snapshot, Tail#{rows => [], meta => []}});
is_snapshot_part(_, _, _) -> false.

%% @doc Whether a term is the state a copy joins when it catches up by state: rows (or
%% `{left_out, Folded, KeyRows}': only the keys of the sender's unstable operations without
%% metadata, `{Key, Rows}' each, the other keys left out, every operation they hold in the
%% vector `Folded'), metadata rows (`{Key, KeyState}'), the delivered vector and the unstable
%% clears (`{Dot, Ts, HandledKeys}'); and, in a state its sender pushed to a copy that
%% lacked operations that left its log unstable, `given_up', the vector of those.
-spec is_merge(term()) -> boolean().
is_merge({merge, State = #{rows := Rows, meta := Meta, delivered := V, clears := Cs}}) ->
    is_vv(maps:get(given_up, State, #{}), 1)
        andalso case State of
                    %% the first part of a state in parts lists its keys
                    #{parts := {_, Count}} -> is_integer(Count) andalso Count >= 1
                                                  andalso is_tuple(Rows);
                    #{parts := _} -> false;
                    _ -> true
                end
        andalso is_merge_rows(Rows)
        andalso is_list(Meta)
        andalso lists:all(fun(M) -> is_tuple(M) andalso tuple_size(M) =:= 2 end, Meta)
        andalso is_vv(V, 1)
        andalso is_list(Cs)
        andalso lists:all(fun({{_, _}, Ts, H}) -> is_map(Ts) andalso is_map(H);
                             (_) -> false
                          end, Cs);
is_merge(_) -> false.

%% @doc Whether the keys of a part of a state in parts are as a state's (see {@link
%% is_merge/1}): `{Key, Rows}' each, and metadata rows `{Key, KeyState}'.
-spec is_merge_part(term(), term()) -> boolean().
is_merge_part(KeyRows, Meta) ->
    is_merge_rows({left_out, #{}, KeyRows})
        andalso is_list(Meta)
        andalso lists:all(fun(M) -> is_tuple(M) andalso tuple_size(M) =:= 2 end, Meta).

%% @doc {@link is_merge_part/2}, for the last part of a state whose parts are read late, with
%% the vector every key of the state is as.
-spec is_merge_part(term(), term(), term()) -> boolean().
is_merge_part(KeyRows, Meta, VP) -> is_vv(VP, 1) andalso is_merge_part(KeyRows, Meta).

is_merge_rows({left_out, Folded, KeyRows}) ->
    is_vv(Folded, 0)
        andalso is_list(KeyRows)
        andalso lists:all(fun({_, Rows}) -> is_rows(Rows); (_) -> false end, KeyRows);
is_merge_rows(Rows) -> is_rows(Rows).

%% A version vector whose counters are integers from `Least' up (a stable vector may count 0).
is_vv(V, Least) ->
    is_map(V) andalso lists:all(fun(C) -> is_integer(C) andalso C >= Least end, maps:values(V)).

is_rows(Rows) ->
    is_list(Rows) andalso lists:all(fun(R) -> is_tuple(R) andalso tuple_size(R) >= 2 end, Rows).
