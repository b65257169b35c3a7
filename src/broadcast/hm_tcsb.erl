%% @doc Tagged causal stable broadcast, pure (seed 000 §4.3–4.8, Algorithm 1), with the
%% extensions a partition-tolerant table needs: retransmission and eager acknowledgements.
%%
%% One state per EC table and node; the members are the table's copy holders. Functions take
%% the state and return the new state and the messages to send (`[{Node, Msg}]'); the server
%% ({@link hm_ec_server}) only sends them.
%% <ul>
%% <li>{@link broadcast/2} ("on broadcast"): timestamp a local operation; it is delivered
%% locally at once and logged for retransmission.</li>
%% <li>{@link receive_op/2} ("on receive"): causal delivery ({@link hm_causal_buffer}); what
%% becomes deliverable is returned tagged with its timestamp and logged.</li>
%% <li>{@link acks/1}, {@link receive_ack/3}: every member periodically tells the others what
%% it has delivered (eager acknowledgements, so stability progresses when some members never
%% write: FEATURES X4).</li>
%% <li>{@link stable/1} ("check stability"): the minimum over members of what each is known to
%% have delivered, learned from their acknowledgements. A member's ack counts only once every
%% operation that member sent before acknowledging has been delivered here, so no operation
%% concurrent with a stable one can still arrive (the condition of Algorithm 1, with acks as
%% empty messages standing for its ts_map).</li>
%% <li>{@link missing/3}: the logged operations a member is not known to have, for
%% retransmission after a reconnect or when they are older than a tick. The log keeps every
%% delivered operation, of any origin, until it is stable, so any member can repair any other
%% after a partition.</li>
%% </ul>
%% Replica ids are `{Node, Incarnation}': a node that restarts without its state starts a new
%% incarnation, so it never reuses a sequence number. Membership, acks and `known' are per node.
%%
%% Invariants: a logged operation is delivered here; the log holds no stable operation after
%% {@link gc/1}; `known' only grows for a member.
-module(hm_tcsb).

-export([new/2, new/3, broadcast/2, receive_op/2, acks/1, receive_ack/3, stable/1, gc/1,
         missing/3, tick/1, set_members/2, members/1, self/1, own_log/1, restore_log/2,
         gc_dots/1, log_msgs/1, forget_member/2, resend_due/2, delivered/1, log_size/1, pending/1,
         known/1]).
-export_type([state/0, message/0]).

-type message() :: hm_causal_buffer:message().
-type replica() :: {node(), term()}.
-record(tcsb, {self :: replica(),
               members :: [node()],
               cb :: hm_causal_buffer:buffer(),
               %% delivered, not yet stable: Dot => {Message, TickLogged}
               log = #{} :: #{hm_vv:dot() => {message(), non_neg_integer()}},
               %% per member node: the incarnation last heard of and what it has delivered
               known = #{} :: #{node() => {term(), hm_vv:vv()}},
               %% acks whose sender's own operations have not all arrived yet
               early_acks = #{} :: #{replica() => hm_vv:vv()},
               ticks = 0 :: non_neg_integer(),
               %% per member: the tick of the last periodic retransmission to it
               resent = #{} :: #{node() => non_neg_integer()},
               %% per member: the tick of its last acknowledgement
               acked = #{} :: #{node() => non_neg_integer()}}).

%% Periodic retransmission, a safety net (distribution is reliable while connected, and a
%% reconnect resends everything): every RESEND_TICKS ticks per member, at most RESEND_MAX
%% messages a round. The cap bounds the storm bench/REPORT.md measured (a busy receiver
%% acknowledges late, so it was sent ever more copies). A longer interval (8 ticks) made the
%% simulator find unsafe stability and divergence (seeds 231, 8 with `make sim SEEDS=1000'):
%% something still relies on prompt retransmission; understand that before raising it.
-define(RESEND_TICKS, 1).
-define(RESEND_MAX, 1000).
%% ...and only to a member that acknowledged within this many ticks: a silent one (down, or
%% not tracking the table yet, e.g. restarting) would only drop them; it gets them once it
%% acknowledges again, and a reconnect sends it everything anyway (found by hm_faults_SUITE:
%% a restarting node flooded with resends it could not use).
-define(SILENT_TICKS, 8).
%% An operation is resent periodically only once it is this many ticks old: a member
%% acknowledges once a tick, so a younger one is most likely delivered there and merely not
%% acknowledged yet (with 1, a third of the operations a loaded node received were such
%% duplicates: bench/REPORT.md).
-define(RESEND_AGE, 2).
-opaque state() :: #tcsb{}.

%% @doc A fresh member: nothing delivered. `Self' is this replica's `{node(), Incarnation}'.
-spec new(replica(), [node()]) -> state().
new(Self, Members) -> new(Self, Members, hm_vv:new()).

%% @doc A member that has delivered `Delivered' (after a restart or a state transfer).
-spec new(replica(), [node()], hm_vv:vv()) -> state().
new(Self = {Node, _}, Members, Delivered) ->
    #tcsb{self = Self, members = lists:usort([Node | Members]),
          cb = hm_causal_buffer:new(Delivered)}.

%% @doc Algorithm 1 "on broadcast": the operation's message (delivered here already) and the
%% sends to every other member.
-spec broadcast(term(), state()) -> {message(), [{node(), term()}], state()}.
broadcast(Payload, S = #tcsb{self = Self = {Node, _}, cb = CB, members = Ms}) ->
    {Ts, CB1} = hm_causal_buffer:send_msg(Self, CB),
    Msg = {Self, Ts, Payload},
    S1 = log_msg(Msg, S#tcsb{cb = CB1}),
    {Msg, [{M, {op, Msg}} || M <- Ms, M =/= Node], S1}.

%% @doc Algorithm 1 "on receive": the messages that became deliverable, in causal order.
-spec receive_op(message(), state()) -> {[message()], state()}.
receive_op(Msg, S = #tcsb{cb = CB}) ->
    {Ready, CB1} = hm_causal_buffer:rcv_msg(Msg, CB),
    %% What members have delivered is learned from their acknowledgements only, not from
    %% these timestamps (Algorithm 1's ts_map): an operation may be relayed by retransmission
    %% after its origin restarted as a new incarnation, and would teach stale knowledge; an
    %% acknowledgement comes straight from the member, every tick (found by the simulator).
    S1 = lists:foldl(fun log_msg/2, S#tcsb{cb = CB1}, Ready),
    {Ready, settle_acks(S1)}.

log_msg(Msg = {Origin, Ts, _}, S = #tcsb{log = L, ticks = T}) ->
    S#tcsb{log = L#{{Origin, maps:get(Origin, Ts)} => {Msg, T}}}.

%% What member `Node' (incarnation `Inc') has delivered. A newer incarnation replaces what
%% was known of the node (it restarted without its state and may lack what the old one had:
%% counting the old one's acks would let operations it lacks be collected as stable); an
%% older incarnation's news is ignored. Incarnations grow with time (hm_ec_server).
learn({Node, Inc}, V, Known) ->
    case Known of
        #{Node := {Inc, Old}} -> Known#{Node := {Inc, hm_vv:join(Old, V)}};
        #{Node := {Cur, _}} when Cur > Inc -> Known;
        _ -> Known#{Node => {Inc, V}}
    end.

known_vv(Node, Known) ->
    case Known of
        #{Node := {_, V}} -> V;
        _ -> #{}
    end.

%% @doc The acknowledgements to send to every other member: `{ack, Replica, Delivered}'.
-spec acks(state()) -> [{node(), term()}].
acks(#tcsb{self = Self = {Node, _}, members = Ms, cb = CB}) ->
    D = hm_causal_buffer:delivered(CB),
    [{M, {ack, Self, D}} || M <- Ms, M =/= Node].

%% @doc Replica `From' has delivered `V'. It counts once this replica has delivered every
%% operation `From' itself sent before acknowledging.
-spec receive_ack(replica(), hm_vv:vv(), state()) -> state().
receive_ack(From = {Node, _}, V, S = #tcsb{early_acks = E, acked = A, ticks = T}) ->
    settle_acks(S#tcsb{early_acks = E#{From => hm_vv:join(maps:get(From, E, #{}), V)},
                       acked = A#{Node => T}}).

settle_acks(S = #tcsb{early_acks = E}) when map_size(E) =:= 0 -> S;
settle_acks(S = #tcsb{early_acks = E, known = K, cb = CB}) ->
    D = hm_causal_buffer:delivered(CB),
    {Ready, Early} = maps:fold(fun(From, V, {R, Er}) ->
                                       case hm_vv:get(From, V) =< hm_vv:get(From, D) of
                                           true -> {R#{From => V}, Er};
                                           false -> {R, Er#{From => V}}
                                       end
                               end, {#{}, #{}}, E),
    K1 = maps:fold(fun(Replica, V, Acc) -> learn(Replica, V, Acc) end, K, Ready),
    S#tcsb{early_acks = Early, known = K1}.

%% @doc Algorithm 1 "check stability": every operation whose dot is in the returned vector
%% is causally stable here.
-spec stable(state()) -> hm_vv:vv().
stable(#tcsb{self = {Node, _}, members = Ms, known = K, cb = CB}) ->
    D = hm_causal_buffer:delivered(CB),
    lists:foldl(fun(M, Acc) when M =:= Node -> Acc;
                   (M, Acc) -> hm_vv:meet(Acc, known_vv(M, K))
                end, D, Ms).

%% @doc Forget logged operations that are stable (every member has them).
-spec gc(state()) -> state().
gc(S) -> element(2, gc_dots(S)).

%% @doc {@link gc/1}, also returning the dots it forgot (to delete them from disc).
-spec gc_dots(state()) -> {[hm_vv:dot()], state()}.
gc_dots(S = #tcsb{log = L}) ->
    V = stable(S),
    {Gone, Kept} = maps:fold(fun(D, E, {G, K}) ->
                                     case hm_vv:contains(D, V) of
                                         true -> {[D | G], K};
                                         false -> {G, K#{D => E}}
                                     end
                             end, {[], #{}}, L),
    {Gone, S#tcsb{log = Kept}}.

%% @doc Every logged operation (delivered here, not yet stable), oldest first per origin: what
%% a state transfer hands on, so the receiver can repair others too.
-spec log_msgs(state()) -> [message()].
log_msgs(#tcsb{log = L}) -> [M || {_, {M, _}} <- lists:sort(maps:to_list(L))].

%% @doc Forget what member `Node' is known to have (it went down or came back, maybe as a new
%% incarnation): stability waits for its next acknowledgement, and {@link missing/3} offers it
%% the whole log.
-spec forget_member(node(), state()) -> state().
forget_member(Node, S = #tcsb{known = K, early_acks = E}) ->
    S#tcsb{known = maps:remove(Node, K),
           early_acks = maps:filter(fun({N, _}, _) -> N =/= Node end, E)}.

%% @doc Put back logged operations read from disc or received in a state transfer (they are
%% delivered here).
-spec restore_log([message()], state()) -> state().
restore_log(Msgs, S) -> lists:foldl(fun log_msg/2, S, Msgs).

%% @doc Logged operations `Peer' is not known to have, oldest first. `all' gives every one
%% (after a reconnect); `old' only those logged at least `RESEND_AGE' ticks ago (a periodic
%% safety net that does not resend what is still in flight or not acknowledged yet).
-spec missing(node(), all | old, state()) -> [message()].
missing(Peer, Which, #tcsb{log = L, known = K, ticks = T}) ->
    Has = known_vv(Peer, K),
    Msgs = [{D, M} || {D, {M, At}} <- maps:to_list(L), not hm_vv:contains(D, Has),
                      Which =:= all orelse At =< T - ?RESEND_AGE],
    [M || {_, M} <- lists:sort(fun({{_, A}, _}, {{_, B}, _}) -> A =< B end, Msgs)].

%% @doc The periodic retransmission to `Peer', if one is due: the oldest logged operations it is
%% not known to have (at most `RESEND_MAX'), once every `RESEND_TICKS' ticks.
-spec resend_due(node(), state()) -> {[message()], state()}.
resend_due(Peer, S = #tcsb{ticks = T, resent = R, acked = A}) ->
    Listening = T - maps:get(Peer, A, -?SILENT_TICKS - 1) =< ?SILENT_TICKS,
    case Listening andalso T - maps:get(Peer, R, -?RESEND_TICKS) >= ?RESEND_TICKS of
        false -> {[], S};
        true ->
            case lists:sublist(missing(Peer, old, S), ?RESEND_MAX) of
                [] -> {[], S};
                Msgs -> {Msgs, S#tcsb{resent = R#{Peer => T}}}
            end
    end.

%% @doc Advance the logical tick used by {@link missing/3}, and forget buffered operations
%% of superseded incarnations ({@link drop_superseded/1}).
-spec tick(state()) -> state().
tick(S = #tcsb{ticks = T}) -> drop_superseded(S#tcsb{ticks = T + 1}).

%% A node that restarted without its state is a new incarnation, and its old one sends no
%% more. An operation of the old one still buffered here waits for an earlier one of it that
%% this replica has not got: if a member has delivered that one, it still logs it and resends
%% it, together with what follows (so dropping the buffered copies loses nothing that member
%% has); if no member has delivered it, it died with the crash, and so did, for good, every
%% later operation of that incarnation that no member delivered: async_ec's contract for a
%% ram_copies node that restarts (docs/guide.md, limits). Without this the causal buffer
%% kept them forever (simulator bug C).
drop_superseded(S = #tcsb{cb = CB}) ->
    case hm_causal_buffer:pending_count(CB) of
        0 -> S;
        _ ->
            Newest = newest_incarnations(S),
            Old = fun({N, Inc}) -> Inc < maps:get(N, Newest, Inc) end,
            S#tcsb{cb = hm_causal_buffer:drop_origins(Old, CB)}
    end.

%% Per node, the newest incarnation this replica has evidence of: delivered, buffered, or
%% acknowledging.
newest_incarnations(#tcsb{self = Self, cb = CB, known = K}) ->
    Seen = [Self | maps:keys(hm_causal_buffer:delivered(CB))]
        ++ [O || {O, _, _} <- hm_causal_buffer:pending(CB)]
        ++ [{N, Inc} || {N, {Inc, _}} <- maps:to_list(K)],
    lists:foldl(fun({N, Inc}, Acc) -> Acc#{N => max(Inc, maps:get(N, Acc, Inc))} end, #{}, Seen).

%% @doc Change the members (copy holders): a removed member no longer holds stability back.
-spec set_members([node()], state()) -> state().
set_members(Ms, S = #tcsb{self = {Node, _}, known = K, early_acks = E}) ->
    Ms1 = lists:usort([Node | Ms]),
    S#tcsb{members = Ms1, known = maps:with(Ms1, K),
           early_acks = maps:filter(fun({N, _}, _) -> lists:member(N, Ms1) end, E)}.

-spec self(state()) -> replica().
self(#tcsb{self = Self}) -> Self.

%% @doc This replica's own logged operations, oldest first (replayed after a state transfer).
-spec own_log(state()) -> [message()].
own_log(#tcsb{self = Self, log = L}) ->
    [M || {_, {M, _}} <- lists:sort([{C, V} || {{R, C}, V} <- maps:to_list(L), R =:= Self])].

-spec members(state()) -> [node()].
members(#tcsb{members = Ms}) -> Ms.

-spec delivered(state()) -> hm_vv:vv().
delivered(#tcsb{cb = CB}) -> hm_causal_buffer:delivered(CB).

-spec log_size(state()) -> non_neg_integer().
log_size(#tcsb{log = L}) -> map_size(L).

%% @doc Operations received but not deliverable yet.
-spec pending(state()) -> non_neg_integer().
pending(#tcsb{cb = CB}) -> hm_causal_buffer:pending_count(CB).

%% @doc What each member is known to have delivered.
-spec known(state()) -> #{node() => hm_vv:vv()}.
known(#tcsb{known = K}) -> maps:map(fun(_, {_, V}) -> V end, K).
