%% @doc The format of what EC tables send between nodes and keep on disc, in one place: how a
%% message is put in its envelope, how an envelope is opened and checked, the shapes of the
%% messages the per-table core accepts, and the version of both formats.
%%
%% An envelope is `{hm_ec, Version, Tab, FromNode, Msg, Cookie}': the wire format's version,
%% the table, the sending node, the message and the table instance (Mnesia's creation
%% cookie: a table deleted and created again under the same name is another instance). A node
%% opens only envelopes of its own version; anything else is dropped and logged (a node of a
%% release with another format, or a foreign message), never applied.
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
%% (see {@link is_merge/1}).</li>
%% </ul>
%% Every message may be lost: a busy connection drops what is sent on it (the sender does
%% not wait), and retransmission and acknowledgements repair the loss. A state
%% (`{snapshot, Snapshot}', `{merge, State}': {@link is_state_transfer/1}) waits for room
%% instead: it is sent once per request, and its loss would cost the copy that asked
%% seconds before it asks again.
%% On disc (`disc_copies' only) the log table `hm_log_Tab' holds a row `format' with
%% {@link disc_version/0}; a copy whose log carries another version is not restored from it.
-module(hm_ec_wire).

-export([version/0, disc_version/0, envelope/4, open/1, is_op_message/1, is_op_shape/1, is_ack/1,
         is_snapshot/1, is_merge/1, is_state_transfer/1]).

-define(VERSION, 1).
-define(DISC_VERSION, 1).

%% @doc The wire format's version.
-spec version() -> pos_integer().
version() -> ?VERSION.

%% @doc The version of the disc log's format.
-spec disc_version() -> pos_integer().
disc_version() -> ?DISC_VERSION.

%% @doc `Msg' of table `Tab' (instance `Cookie') from node `From', in its envelope.
-spec envelope(atom(), node(), term(), term()) -> tuple().
envelope(Tab, From, Msg, Cookie) -> {hm_ec, ?VERSION, Tab, From, Msg, Cookie}.

%% @doc Open an envelope: its table, sender, message and table instance, or why it is not
%% one this node reads.
-spec open(term()) -> {ok, atom(), node(), term(), term()} | {error, term()}.
open({hm_ec, ?VERSION, Tab, From, Msg, Cookie}) when is_atom(Tab), is_atom(From) ->
    {ok, Tab, From, Msg, Cookie};
open({hm_ec, V, _, _, _, _}) when V =/= ?VERSION -> {error, {unsupported_version, V}};
open(_) -> {error, not_an_envelope}.

%% @doc Whether a message carries a copy's state (a snapshot, or a state to join): its
%% sender waits for room on a busy connection rather than drop it.
-spec is_state_transfer(term()) -> boolean().
is_state_transfer({snapshot, _}) -> true;
is_state_transfer({merge, _}) -> true;
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
%% vector, the logged operations and the unstable clears.
-spec is_snapshot(term()) -> boolean().
is_snapshot({snapshot, #{rows := Rows, meta := Meta, delivered := V, log := L, clears := Cs}}) ->
    is_list(Rows) andalso is_list(Meta) andalso is_map(V) andalso is_list(L) andalso is_list(Cs);
is_snapshot(_) -> false.

%% @doc Whether a term is the state a copy joins when it catches up by state: rows (or
%% `{left_out, Folded, KeyRows}': only the keys of the sender's unstable operations without
%% metadata, `{Key, Rows}' each, the other keys left out, every operation they hold in the
%% vector `Folded'), metadata rows (`{Key, KeyState}'), the delivered vector and the unstable
%% clears (`{Dot, Ts, HandledKeys}'); and, in a state its sender pushed to a copy that
%% lacked operations that left its log unstable, `given_up', the vector of those.
-spec is_merge(term()) -> boolean().
is_merge({merge, State = #{rows := Rows, meta := Meta, delivered := V, clears := Cs}}) ->
    is_vv(maps:get(given_up, State, #{}), 1)
        andalso is_merge_rows(Rows)
        andalso is_list(Meta)
        andalso lists:all(fun(M) -> is_tuple(M) andalso tuple_size(M) =:= 2 end, Meta)
        andalso is_vv(V, 1)
        andalso is_list(Cs)
        andalso lists:all(fun({{_, _}, Ts, H}) -> is_map(Ts) andalso is_map(H);
                             (_) -> false
                          end, Cs);
is_merge(_) -> false.

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
