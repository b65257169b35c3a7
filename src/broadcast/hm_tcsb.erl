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
%% <li>{@link acks/1}, {@link receive_ack/4}: every member periodically tells the others what
%% it has delivered (eager acknowledgements, so stability progresses when some members never
%% write: FEATURES X4).</li>
%% <li>{@link stable/1} ("check stability"): the minimum over members of what each is known to
%% have delivered, learned from their acknowledgements. A member's ack counts only once every
%% operation that member sent before acknowledging has been delivered here, so no operation
%% concurrent with a stable one can still arrive (the condition of Algorithm 1, with acks as
%% empty messages standing for its ts_map). Nothing is stable while an operation of a gone
%% incarnation may still arrive (settled/1, below).</li>
%% <li>{@link missing/3}: the logged operations a member is not known to have, for
%% retransmission after a reconnect or when they are old enough (origin 2 ticks, relays 8).
%% The log keeps every delivered operation, of any origin, until it is stable, so any member
%% can repair any other after a partition; it is kept per origin in sequence order, so gc and
%% resends never scan it.</li>
%% </ul>
%% Replica ids are `{Node, Incarnation}': a node that restarts without its state starts a new
%% incarnation, so it never reuses a sequence number. Membership, acks and `known' are per
%% node. An incarnation is gone once a newer one of its node is heard of, or its node is no
%% longer a member: its operations are then delivered only when ready on arrival (never
%% buffered), and acks carry the newest incarnation of every node their sender heard of, so
%% stability can wait until every member has caught up on them (bugs C, H, J of
%% sim/REPORT.md).
%%
%% Invariants: a logged operation is delivered here; the log holds no stable operation after
%% {@link gc/1}; `known' only grows for a member incarnation; no operation of a gone
%% incarnation stays buffered.
-module(hm_tcsb).

-export([new/2, new/3, broadcast/2, receive_op/2, acks/1, receive_ack/4,
         stable/1, gc/1,
         missing/3, tick/1, set_members/2, members/1, self/1, restore_log/2,
         gc_dots/1, log_msgs/1, forget_member/2, resend_due/2, delivered/1, log_size/1, pending/1,
         known/1]).
-export_type([state/0, message/0]).

-type message() :: hm_causal_buffer:message().
-type replica() :: {node(), term()}.
-type newest() :: #{node() => term()}.
-record(tcsb, {self :: replica(),
               members :: [node()],
               cb :: hm_causal_buffer:buffer(),
               %% delivered, not yet stable, per origin in sequence order (gc drops a prefix,
               %% resends start where a member's knowledge ends: neither scans the log):
               %% Origin => Seq => {Message, TickLogged}
               log = #{} :: #{replica() => gb_trees:tree(pos_integer(),
                                                         {message(), non_neg_integer()})},
               %% per member node: the incarnation last heard of, what it has delivered, and
               %% the newest incarnation of every node it had heard of when acknowledging
               known = #{} :: #{node() => {term(), hm_vv:vv(), newest()}},
               %% acks whose sender's own operations have not all arrived yet
               early_acks = #{} :: #{replica() => {hm_vv:vv(), newest()}},
               %% per node, the newest incarnation this replica has evidence of
               newest = #{} :: newest(),
               ticks = 0 :: non_neg_integer(),
               %% per member: the tick of the last periodic retransmission to it
               resent = #{} :: #{node() => non_neg_integer()},
               %% per member: the tick of its last acknowledgement
               acked = #{} :: #{node() => non_neg_integer()}}).

%% Periodic retransmission, a safety net (distribution is reliable while connected, and a
%% reconnect resends everything): every RESEND_TICKS ticks per member, at most RESEND_MAX
%% messages a round. The cap bounds the storm bench/REPORT.md measured (a busy receiver
%% acknowledges late, so it was sent ever more copies). Correctness does not depend on how
%% prompt it is: with intervals and ages of 8 to 60 ticks the simulator passes thousands of
%% seeds (it did not before bugs H and I, sim/REPORT.md, were fixed).
-define(RESEND_TICKS, 1).
-define(RESEND_MAX, 1000).
%% ...and only to a member that acknowledged within this many ticks: a silent one (down, or
%% not tracking the table yet, e.g. restarting) would only drop them; it gets them once it
%% acknowledges again, and a reconnect sends it everything anyway (found by hm_faults_SUITE:
%% a restarting node flooded with resends it could not use).
-define(SILENT_TICKS, 8).
%% An operation is resent periodically only once it is RESEND_AGE ticks old: a member
%% acknowledges once a tick, so a younger one is most likely delivered there and merely not
%% acknowledged yet (with 1, a third of the operations a loaded node received were such
%% duplicates: bench/REPORT.md). Its origin resends it; any other member that logs it relays
%% it only from RELAY_AGE ticks on, for when the origin is cut off or restarted without it
%% (every member relaying at once sent about N^2/3 messages per operation: sim/REPORT.md).
-define(RESEND_AGE, 2).
-define(RELAY_AGE, 8).
-opaque state() :: #tcsb{}.

%% @doc A fresh member: nothing delivered. `Self' is this replica's `{node(), Incarnation}'.
-spec new(replica(), [node()]) -> state().
new(Self, Members) -> new(Self, Members, hm_vv:new()).

%% @doc A member that has delivered `Delivered' (after a restart or a state transfer).
-spec new(replica(), [node()], hm_vv:vv()) -> state().
new(Self = {Node, _}, Members, Delivered) ->
    see([Self | maps:keys(Delivered)],
        #tcsb{self = Self, members = lists:usort([Node | Members]),
              cb = hm_causal_buffer:new(Delivered)}).

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
receive_op(Msg = {Origin, Ts, _}, S0) ->
    S = #tcsb{cb = CB} = see(maps:keys(Ts), S0),
    case superseded(Origin, S) andalso
        not hm_causal_buffer:is_ready(Msg, hm_causal_buffer:delivered(CB)) of
        true -> {[], S};        % never buffered: see superseded/2
        false -> deliver(Msg, S)
    end.

deliver(Msg, S = #tcsb{cb = CB}) ->
    {Ready, CB1} = hm_causal_buffer:rcv_msg(Msg, CB),
    %% What members have delivered is learned from their acknowledgements only, not from
    %% these timestamps (Algorithm 1's ts_map): an operation may be relayed by retransmission
    %% after its origin restarted as a new incarnation, and would teach stale knowledge; an
    %% acknowledgement comes straight from the member, every tick (found by the simulator).
    S1 = lists:foldl(fun log_msg/2, S#tcsb{cb = CB1}, Ready),
    {Ready, settle_acks(S1)}.

log_msg(Msg = {Origin, Ts, _}, S = #tcsb{log = L, ticks = T}) ->
    Tree = maps:get(Origin, L, gb_trees:empty()),
    S#tcsb{log = L#{Origin => gb_trees:enter(maps:get(Origin, Ts), {Msg, T}, Tree)}}.

%% What member `Node' (incarnation `Inc') has delivered. A newer incarnation replaces what
%% was known of the node (it restarted without its state and may lack what the old one had:
%% counting the old one's acks would let operations it lacks be collected as stable); an
%% older incarnation's news is ignored. Incarnations grow with time (hm_ec_server).
learn({Node, Inc}, {V, New}, Known) ->
    case Known of
        #{Node := {Inc, Old, OldNew}} ->
            Known#{Node := {Inc, hm_vv:join(Old, V), join_newest(OldNew, New)}};
        #{Node := {Cur, _, _}} when Cur > Inc -> Known;
        _ -> Known#{Node => {Inc, V, New}}
    end.

known_vv(Node, Known) ->
    case Known of
        #{Node := {_, V, _}} -> V;
        _ -> #{}
    end.

join_newest(A, B) ->
    maps:fold(fun(N, Inc, Acc) -> Acc#{N => max(Inc, maps:get(N, Acc, Inc))} end, A, B).

%% @doc The acknowledgements to send to every other member: `{ack, Replica, Delivered,
%% Newest}', `Newest' the newest incarnation of every node this replica has heard of.
-spec acks(state()) -> [{node(), term()}].
acks(S = #tcsb{self = Self = {Node, _}, members = Ms, cb = CB}) ->
    D = hm_causal_buffer:delivered(CB),
    New = newest(S),
    [{M, {ack, Self, D, New}} || M <- Ms, M =/= Node].

%% Per node heard of, its newest incarnation, or `removed' (an atom: greater than any
%% integer incarnation) for a node that is not a member (its copy was deleted, or it has not
%% been added here yet): every incarnation of it is gone as far as this replica knows.
newest(#tcsb{members = Ms, newest = New}) ->
    maps:map(fun(N, Inc) ->
                     case lists:member(N, Ms) of
                         true -> Inc;
                         false -> removed
                     end
             end, New).

%% @doc Replica `From' has delivered `V' and heard of the incarnations `Newest'. It counts once
%% this replica has delivered every operation `From' itself sent before acknowledging.
-spec receive_ack(replica(), hm_vv:vv(), newest(), state()) -> state().
receive_ack(From = {Node, _}, V, New, S0) ->
    S = #tcsb{early_acks = E, acked = A, ticks = T} =
        see([From | maps:keys(V)] ++ maps:to_list(New), S0),
    {V0, New0} = maps:get(From, E, {#{}, #{}}),
    settle_acks(S#tcsb{early_acks = E#{From => {hm_vv:join(V0, V), join_newest(New0, New)}},
                       acked = A#{Node => T}}).

settle_acks(S = #tcsb{early_acks = E}) when map_size(E) =:= 0 -> S;
settle_acks(S = #tcsb{early_acks = E, known = K, cb = CB}) ->
    D = hm_causal_buffer:delivered(CB),
    {Ready, Early} = maps:fold(fun(From, Ack = {V, _}, {R, Er}) ->
                                       case hm_vv:get(From, V) =< hm_vv:get(From, D) of
                                           true -> {R#{From => Ack}, Er};
                                           false -> {R, Er#{From => Ack}}
                                       end
                               end, {#{}, #{}}, E),
    K1 = maps:fold(fun(Replica, V, Acc) -> learn(Replica, V, Acc) end, K, Ready),
    S#tcsb{early_acks = Early, known = K1}.

%% @doc Algorithm 1 "check stability": every operation whose dot is in the returned vector
%% is causally stable here. Nothing is while a superseded incarnation is not settled
%% ({@link settled/1}).
-spec stable(state()) -> hm_vv:vv().
stable(S = #tcsb{self = {Node, _}, members = Ms, known = K, cb = CB}) ->
    D = hm_causal_buffer:delivered(CB),
    case settled(S) of
        true -> lists:foldl(fun(M, Acc) when M =:= Node -> Acc;
                               (M, Acc) -> hm_vv:meet(Acc, known_vv(M, K))
                            end, D, Ms);
        false -> #{}
    end.

%% Algorithm 1 counts on every operation concurrent with a stable one coming from a member
%% whose acknowledgements settle only once its own earlier operations arrived. A node that
%% restarted without its state breaks that: its old incarnation acknowledges no more, yet its
%% operations that some member delivered keep travelling (resent from logs) and may arrive
%% here after an operation concurrent with them was folded as stable: replicas diverge
%% (simulator, seed 8 with slower relays; bug H). The same holds for a member whose copy was
%% removed (bug J): superseded/2 counts every origin of a node that is not a member as gone.
%% So for every superseded incarnation O in sight,
%% stability waits until (1) every other member has acknowledged after hearing of a newer
%% incarnation of O's node, and (2) this replica has delivered every operation of O any member
%% reported. That suffices because, from the moment a member hears of the newer incarnation,
%% it delivers an operation of O only if some member delivered it before (superseded/2: it
%% neither buffers nor keeps O's operations that are not ready), and that member's
%% acknowledgement of (1) reported it.
settled(S = #tcsb{self = {Node, _}, members = Ms, known = K, cb = CB}) ->
    D = hm_causal_buffer:delivered(CB),
    Others = [M || M <- Ms, M =/= Node],
    Vs = [D | [known_vv(M, K) || M <- Others]],
    Old = lists:usort([O || V <- Vs, O <- maps:keys(V), superseded(O, S)]),
    lists:all(fun(O = {N, Inc}) ->
                      lists:all(fun(M) -> heard_newer(M, N, Inc, K) end, Others) andalso
                          lists:all(fun(V) -> hm_vv:get(O, V) =< hm_vv:get(O, D) end, Vs)
              end, Old).

heard_newer(M, N, Inc, K) ->
    case K of
        #{M := {_, _, MNew}} -> maps:get(N, MNew, Inc) > Inc;
        _ -> false
    end.

%% @doc Forget logged operations that are stable (every member has them).
-spec gc(state()) -> state().
gc(S) -> element(2, gc_dots(S)).

%% @doc {@link gc/1}, also returning the dots it forgot (to delete them from disc).
-spec gc_dots(state()) -> {[hm_vv:dot()], state()}.
gc_dots(S = #tcsb{log = L}) ->
    V = stable(S),
    {Gone, Kept} = maps:fold(fun(O, Tree, {G, K}) ->
                                     {G1, Tree1} = drop_upto(O, hm_vv:get(O, V), Tree, G),
                                     case gb_trees:is_empty(Tree1) of
                                         true -> {G1, K};
                                         false -> {G1, K#{O => Tree1}}
                                     end
                             end, {[], #{}}, L),
    {Gone, S#tcsb{log = Kept}}.

%% Stable operations of an origin are a prefix of its sequence numbers.
drop_upto(O, Upto, Tree, Gone) ->
    case gb_trees:is_empty(Tree) of
        true -> {Gone, Tree};
        false ->
            case gb_trees:smallest(Tree) of
                {Seq, _} when Seq =< Upto ->
                    {_, _, Tree1} = gb_trees:take_smallest(Tree),
                    drop_upto(O, Upto, Tree1, [{O, Seq} | Gone]);
                _ -> {Gone, Tree}
            end
    end.

%% @doc Every logged operation (delivered here, not yet stable), oldest first per origin: what
%% a state transfer hands on, so the receiver can repair others too.
-spec log_msgs(state()) -> [message()].
log_msgs(#tcsb{log = L}) ->
    [M || {_, Tree} <- lists:sort(maps:to_list(L)), {M, _} <- gb_trees:values(Tree)].

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
restore_log(Msgs, S) ->
    lists:foldl(fun log_msg/2, see([O || {_, Ts, _} <- Msgs, O <- maps:keys(Ts)], S), Msgs).

%% @doc Logged operations `Peer' is not known to have, oldest first. `all' gives every one;
%% `old' only those logged at least `RESEND_AGE' ticks ago if this replica is their origin,
%% `RELAY_AGE' otherwise (a periodic safety net that does not resend what is still in flight
%% or not acknowledged yet, and leaves resending to the origin first); `reconnect' (when
%% `Peer' comes back) every one of this replica's own and the others' from `RELAY_AGE' on:
%% every member resending everything on a heal sent each operation once per member.
-spec missing(node(), all | old | reconnect, state()) -> [message()].
missing(Peer, Which, S) -> missing(Peer, Which, infinity, S).

%% At most `Max', oldest first (by sequence number, then origin). Per origin it reads only
%% from what `Peer' is known to have on, and stops at the first operation not due (an
%% origin's operations are logged in sequence order, at nondecreasing ticks).
missing(Peer, Which, Max, #tcsb{self = {Node, _}, log = L, known = K, ticks = T}) ->
    Has = known_vv(Peer, K),
    Due = fun(_, _) when Which =:= all -> true;
             ({N, _}, _) when N =:= Node, Which =:= reconnect -> true;
             ({N, _}, At) when N =:= Node -> At =< T - ?RESEND_AGE;
             (_, At) -> At =< T - ?RELAY_AGE
          end,
    Msgs = maps:fold(fun(O, Tree, Acc) ->
                             It = gb_trees:iterator_from(hm_vv:get(O, Has) + 1, Tree),
                             take_due(O, It, Due, Max, Acc)
                     end, [], L),
    Sorted = [M || {_, M} <- lists:sort(Msgs)],
    case Max of
        infinity -> Sorted;
        _ -> lists:sublist(Sorted, Max)
    end.

take_due(_O, _It, _Due, 0, Acc) -> Acc;
take_due(O, It, Due, Max, Acc) ->
    case gb_trees:next(It) of
        {Seq, {M, At}, It1} ->
            case Due(O, At) of
                true -> take_due(O, It1, Due, dec(Max), [{{Seq, O}, M} | Acc]);
                false -> Acc
            end;
        none -> Acc
    end.

dec(infinity) -> infinity;
dec(N) -> N - 1.

%% @doc The periodic retransmission to `Peer', if one is due: the oldest logged operations it is
%% not known to have (at most `RESEND_MAX'), once every `RESEND_TICKS' ticks.
-spec resend_due(node(), state()) -> {[message()], state()}.
resend_due(Peer, S = #tcsb{ticks = T, resent = R, acked = A}) ->
    Listening = T - maps:get(Peer, A, -?SILENT_TICKS - 1) =< ?SILENT_TICKS,
    case Listening andalso T - maps:get(Peer, R, -?RESEND_TICKS) >= ?RESEND_TICKS of
        false -> {[], S};
        true ->
            case missing(Peer, old, ?RESEND_MAX, S) of
                [] -> {[], S};
                Msgs -> {Msgs, S#tcsb{resent = R#{Peer => T}}}
            end
    end.

%% @doc Advance the logical tick used by {@link missing/3}.
-spec tick(state()) -> state().
tick(S = #tcsb{ticks = T}) -> S#tcsb{ticks = T + 1}.

%% Take note of replicas (`{Node, Incarnation}') heard of: a newer incarnation of a node
%% supersedes the older ones (incarnations grow with time, hm_ec_server).
see(Replicas, S = #tcsb{newest = New}) ->
    New1 = lists:foldl(fun({N, Inc}, Acc) when is_atom(N), Inc =/= removed ->
                               case Acc of
                                   #{N := Cur} when Cur >= Inc -> Acc;
                                   _ -> Acc#{N => Inc}
                               end;
                          (_, Acc) -> Acc
                       end, New, Replicas),
    case New1 =:= New of
        true -> S;
        false -> drop_superseded(S#tcsb{newest = New1})
    end.

superseded({N, Inc}, #tcsb{members = Ms, newest = New}) ->
    Inc < maps:get(N, New, Inc) orelse not lists:member(N, Ms).

%% A node that restarted without its state is a new incarnation, and its old one sends no
%% more. From the moment this replica hears of the new one, it delivers an operation of the
%% old one only when it is ready on arrival, and drops those buffered: such an operation waits
%% for an earlier one of the old incarnation. If a member delivered that earlier one, it still
%% logs and resends it, then the later one (so dropping loses nothing that member has); if no
%% member did, both died with the crash, as async_ec allows for a ram_copies node
%% (docs/guide.md, limits). This keeps what superseded incarnations can still deliver
%% anywhere known to settled/1, and the causal buffer from keeping them forever (bug C).
drop_superseded(S = #tcsb{cb = CB}) ->
    case hm_causal_buffer:pending_count(CB) of
        0 -> S;
        _ -> S#tcsb{cb = hm_causal_buffer:drop_origins(fun(O) -> superseded(O, S) end, CB)}
    end.

%% @doc Change the members (copy holders): a removed member no longer holds stability back.
-spec set_members([node()], state()) -> state().
set_members(Ms, S = #tcsb{self = {Node, _}, members = Old, known = K, early_acks = E}) ->
    Ms1 = lists:usort([Node | Ms]),
    S1 = S#tcsb{members = Ms1, known = maps:with(Ms1, K),
                early_acks = maps:filter(fun({N, _}, _) -> lists:member(N, Ms1) end, E)},
    case Ms1 =:= Old of
        true -> S1;
        false -> drop_superseded(S1)        % a removed member's incarnations are gone
    end.

-spec self(state()) -> replica().
self(#tcsb{self = Self}) -> Self.

-spec members(state()) -> [node()].
members(#tcsb{members = Ms}) -> Ms.

-spec delivered(state()) -> hm_vv:vv().
delivered(#tcsb{cb = CB}) -> hm_causal_buffer:delivered(CB).

-spec log_size(state()) -> non_neg_integer().
log_size(#tcsb{log = L}) -> maps:fold(fun(_, Tree, N) -> N + gb_trees:size(Tree) end, 0, L).

%% @doc Operations received but not deliverable yet.
-spec pending(state()) -> non_neg_integer().
pending(#tcsb{cb = CB}) -> hm_causal_buffer:pending_count(CB).

%% @doc What each member is known to have delivered.
-spec known(state()) -> #{node() => hm_vv:vv()}.
known(#tcsb{known = K}) -> maps:map(fun(_, {_, V, _}) -> V end, K).
