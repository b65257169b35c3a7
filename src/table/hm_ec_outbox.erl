%% @doc What a table copy sends to each member, pure: consecutive `async' operations bound for
%% the same member leave together, as one `{ops, Msgs}' message, instead of one message each.
%%
%% An operation's broadcast (the Hypermnesia paper, *Hypermnesia: Eventual Consistency in
%% Mnesia*, §4.4, Algorithm 1 "on broadcast") sends it to every other member. Sent one by one,
%% a stream of updates costs a distribution message per update and member: its encoding and
%% a socket write at the sender, a decoding, a wake-up and an envelope check at the receiver,
%% which is much of what an update costs once the per-key CRDT is held in memory (10,000
%% adds to one key of a CRDT table on three nodes: a quarter to two fifths of the cluster's
%% CPU, bench/REPORT.md). Held for a moment instead ({@link send/3}), then released together ({@link flush/1}, which
%% the caller runs a millisecond after the first message was held), they cost one message per
%% member and burst.
%%
%% What is held: `{op, Msg}' of an `async' operation. Everything else (a `sync' operation, whose
%% caller waits for the members; acknowledgements, retransmission rounds, snapshots) leaves at
%% once, behind what is held for the same member. So every member receives the same messages
%% in the same order as when each left at once; only their grouping and timing differ, as on
%% a network that delays them, which the broadcast tolerates (it delivers in causal order and
%% retransmits what is lost). At most `?MAX_HELD' operations are held per member; a full
%% group leaves at once.
%%
%% Invariants: per member, the concatenation of what {@link send/3} and {@link flush/1}
%% release (`{ops, Ms}' read as its `{op, M}' in order) is the sequence of messages given to
%% {@link send/3}; after {@link flush/1} nothing is held.
-module(hm_ec_outbox).

-export([new/0, send/3, flush/1, is_empty/1, held/1]).
-export_type([outbox/0]).

-define(MAX_HELD, 256).

%% Per member: how many operations are held, and the operations, newest first.
-opaque outbox() :: #{node() => {pos_integer(), [term()]}}.

%% @doc Nothing held.
-spec new() -> outbox().
new() -> #{}.

%% @doc Send `Msg' to `Node': the messages to send now, in order (none when it is held).
-spec send(node(), term(), outbox()) -> {[{node(), term()}], outbox()}.
send(Node, {op, M = {_, _, {async, _, _}}}, Box) ->
    case Box of
        #{Node := {N, Ms}} when N + 1 >= ?MAX_HELD ->
            {[{Node, {ops, lists:reverse([M | Ms])}}], maps:remove(Node, Box)};
        #{Node := {N, Ms}} -> {[], Box#{Node := {N + 1, [M | Ms]}}};
        _ -> {[], Box#{Node => {1, [M]}}}
    end;
send(Node, Msg, Box) ->
    case maps:take(Node, Box) of
        {Held, Box1} -> {[release(Node, Held), {Node, Msg}], Box1};
        error -> {[{Node, Msg}], Box}
    end.

%% @doc Everything held, one message per member: `{op, M}' for one operation, `{ops, Ms}'
%% for more, oldest first.
-spec flush(outbox()) -> {[{node(), term()}], outbox()}.
flush(Box) -> {[release(N, Held) || {N, Held} <- lists:sort(maps:to_list(Box))], new()}.

%% @doc Whether nothing is held.
-spec is_empty(outbox()) -> boolean().
is_empty(Box) -> map_size(Box) =:= 0.

%% @doc How many operations are held, for every member together.
-spec held(outbox()) -> non_neg_integer().
held(Box) -> maps:fold(fun(_, {N, _}, Acc) -> Acc + N end, 0, Box).

release(Node, {1, [M]}) -> {Node, {op, M}};
release(Node, {_, Ms}) -> {Node, {ops, lists:reverse(Ms)}}.
