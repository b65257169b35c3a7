%% @doc Tagged causal stable broadcast, pure (the Hypermnesia paper, *Hypermnesia: Eventual
%% Consistency in Mnesia*, §4.3–4.8, Algorithm 1), with the extensions a partition-tolerant
%% table needs: retransmission and eager acknowledgements.
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
%% write).</li>
%% <li>{@link stable/1} ("check stability"): the minimum over members of what each is known to
%% have delivered, learned from their acknowledgements. A member's ack counts only once every
%% operation that member sent before acknowledging has been delivered here, so no operation
%% concurrent with a stable one can still arrive (the condition of Algorithm 1, with acks as
%% empty messages standing for its ts_map). Nothing is stable while an operation of a gone
%% incarnation may still arrive (settled/1, below).</li>
%% <li>{@link resend_due/2}, {@link missing/3}: retransmission. The log keeps every delivered
%% operation, of any origin, until it is stable, so any member can repair any other after a
%% partition; it is kept per origin in sequence order, so gc and resends never scan it. A
%% member is sent what it REPORTED it lacks (its latest acknowledgement, whether or not that
%% acknowledgement counts for stability yet), in causal order, with a window of operations
%% in flight that adapts to what the member and the link take. Starting from settled
%% acknowledgements instead deadlocks after a partition under load: each side's
%% acknowledgements wait for the very operations the other side would resend, and resends
%% that start at the beginning of the log and are capped never reach the gap.</li>
%% <li>{@link behind/2}, {@link merge/2}: catching up by state. A replica far behind a member
%% takes that member's state (its table's keys, joined into its own by the layer above) and
%% counts as delivered what the member delivered, without those operations: it cannot
%% relay them (the log holds every operation delivered here as an operation and not
%% stable).</li>
%% </ul>
%% Replica ids are `{Node, Incarnation}': a node that restarts without its state starts a new
%% incarnation, so it never reuses a sequence number. Membership, acks and `known' are per
%% node. An incarnation is gone once a newer one of its node is heard of, or its node is no
%% longer a member: its operations are then delivered only when ready on arrival (never
%% buffered), and acks carry the newest incarnation of every node their sender heard of, so
%% stability can wait until every member has caught up on them (sim/REPORT.md tells the
%% schedules that showed why).
%%
%% Invariants: a logged operation is delivered here; every operation delivered here as an
%% operation (not by state) is logged until stable; the log holds no stable operation after
%% {@link gc/1}; `known' only grows for a member incarnation; what a member reported only
%% grows for a member incarnation, and every operation retransmitted is ready at the member
%% once those retransmitted before it arrived; no operation of a gone incarnation stays
%% buffered.
-module(hm_tcsb).

-export([new/2, new/3, new/4, broadcast/2, receive_op/2, receive_ready/2, receive_unready/2, acks/1, receive_ack/4,
         stable/1, gc/1,
         missing/3, tick/1, set_members/2, members/1, self/1, restore_log/2,
         gc_dots/1, gc_ops/1, log_msgs/1, fold_logged/3, forget_member/2, resend_due/2, delivered/1,
         log_size/1,
         pending/1, known/1, reported/2, silent/3, acked_within/3, lag/2, superseded/2,
         retransmission/1, behind/2, merge/2]).
-export_type([state/0, message/0, opts/0]).

-define(RESEND_MAX, 1000).
-type message() :: hm_causal_buffer:message().
-type replica() :: {node(), term()}.
-type newest() :: #{node() => term()}.
-record(tcsb, {self :: replica(),
               members :: [node()],
               cb :: hm_causal_buffer:buffer(),
               %% every operation delivered here as an operation and not stable yet, per
               %% origin in sequence order, with the tick it was logged at
               log = hm_tcsb_log:new() :: hm_tcsb_log:log(),
               %% per member node: the incarnation last heard of, what it has delivered, and
               %% the newest incarnation of every node it had heard of when acknowledging
               known = #{} :: #{node() => {term(), hm_vv:vv(), newest()}},
               %% acks whose sender's own operations have not all arrived yet
               early_acks = #{} :: #{replica() => {hm_vv:vv(), newest()}},
               %% per node, the newest incarnation this replica has evidence of
               newest = #{} :: newest(),
               ticks = 0 :: non_neg_integer(),
               %% per member node: its incarnation and what it reported it has delivered in
               %% its acknowledgements, settled or not (where retransmission starts)
               has = #{} :: #{node() => {term(), hm_vv:vv()}},
               %% per member: retransmission in flight (the cut it reaches, the rounds not
               %% acknowledged yet, oldest first) and the member's window; see resend_due/2
               flight = #{} :: #{node() => {hm_vv:vv(), [{non_neg_integer(), hm_vv:vv()}],
                                            pos_integer()}},
               %% per member: the tick of its last acknowledgement
               acked = #{} :: #{node() => non_neg_integer()},
               %% per member, and origin logged here or reported by the member: what the
               %% member reported of that origin, and the tick that last changed
               %% (resend_due/2: is a late round lost, is the member stuck on that origin?)
               moved = #{} :: #{node() => #{replica() => {non_neg_integer(), non_neg_integer()}}},
               %% per member: the origins this replica relays to it because it was stuck on
               %% them, for as long as it gets nothing of them beyond what was sent from here
               %% (resend_due/2)
               feeding = #{} :: #{node() => #{replica() => true}},
               %% per member node: its incarnation and what it reported at the last ticks,
               %% newest first, back to the newest report at least RELAY_AGE ticks old
               %% (relays/3: what a member has logged that long is what it relays)
               past = #{} :: #{node() => {term(), [{non_neg_integer(), hm_vv:vv()}]}},
               window = ?RESEND_MAX :: pos_integer()}).

%% Retransmission (resend_due/2). Distribution is reliable while connected but, under load,
%% drops what is sent to a busy connection (`nosuspend'), and a partition loses what was in
%% flight; so every member, every tick, sends each reachable member the logged operations
%% that member reported (in its last acknowledgement, settled or not) it has not delivered:
%% in causal order, so that every one is deliverable on arrival whatever the cap cuts off;
%% at most a window of them in flight per member, continuing where the last round stopped;
%% and going back to what the member reported when a round is not acknowledged within
%% RTO_TICKS and what the member reported of the round's origins did not move meanwhile
%% (it was lost; a member still delivering is only late, busy with a backlog). The window adapts as TCP's does: it starts at `window' (default
%% RESEND_MAX), doubles when a round is acknowledged in time, up to MAX_WINDOW_FACTOR times
%% that, and halves, down to the start, when a round is lost: a backlog of any size drains at
%% what the member and the link can take. Only to a member that acknowledged within
%% SILENT_TICKS: a silent one (down, or not tracking the table yet, e.g. restarting) would
%% only drop them (found by hm_faults_SUITE).
-define(RTO_TICKS, 4).
-define(MAX_WINDOW_FACTOR, 64).
-define(SILENT_TICKS, 8).
%% An operation is resent periodically only once it is RESEND_AGE ticks old: a member
%% acknowledges once a tick, so a younger one is most likely delivered there and merely not
%% acknowledged yet (with 1, a third of the operations a loaded node received were such
%% duplicates: bench/REPORT.md). Its origin resends it; any other member that logs it relays
%% it only from RELAY_AGE ticks on, for when the origin is cut off or restarted without it
%% (every member relaying at once sent about N^2/3 messages per operation: sim/REPORT.md);
%% and only one member relays to a given member, every origin in one causal walk: the first
%% node among the members alive (acknowledging within SILENT_TICKS) other than that member
%% that had, RELAY_AGE ticks ago, something that member lacks (relays/3). Every member
%% relays an origin once the member has not moved on it for RELAY_AGE ticks (the relay
%% cannot reach it). After a heal every member relayed the whole backlog to the other side,
%% so each operation arrived N-1 times (the simulator's full-load family: 70 % fewer
%% duplicates with one relay). Choosing the relay by what members have now, per origin, let
%% a member catching up itself be the relay, with nothing old enough to relay, while those
%% that had everything waited for it: the member behind got a few operations a tick, from
%% origins each waiting for another's (hm_faults_SUITE, and the simulator's slow receivers).
%% An origin silent for RESEND_AGE ticks (cut off, or down) cannot resend: the first member
%% alive that has what a member lacks of it relays those operations as their origin would,
%% at RESEND_AGE (first_relays/4). A member lacking one cannot deliver what depends on it,
%% from any origin: in the simulator's full-load family, what waited in causal buffers
%% during the cut fell by 57 % (at no service time; 24 % at 3 ms a member operation).
%% So does that member for a member stuck on an origin, one that has not moved on it for
%% STUCK_TICKS ticks, whoever is alive: neither the origin nor the relay reaches it. It goes
%% on relaying that origin while the member gets none of it beyond what was sent from here.
%% After a heal the connections between some nodes can stay silent for seconds while TCP's
%% retransmission timer, backed off during the cut, runs out, and a node whose connections
%% are both back is the only way through: with RELAY_AGE ticks, a member stuck on one origin
%% held back every operation depending on it, and the other members' writers waited on
%% flow control for 2 s (3 nodes, 3 s silent cuts; the simulator's silent partitions, whose
%% heals leave such connections: a copy caught up 1.3 s sooner in
%% hm_sim_tests:regression_relay_around_a_silent_connection_test).
%% With no retransmission round in flight to a member, an origin resends its own operation
%% to it only once the member has not advanced on the origin for RESEND_AGE ticks, or once
%% the operation is 2 * RTO_TICKS old: a member busy with a backlog holds operations it
%% received and has not applied yet, and acknowledges only what it applied. Resent at
%% RESEND_AGE whatever the member was doing, 66 % of what a copy received in the 2 s after a
%% heal were duplicates (bench/REPORT.md); in the simulator's full load with receivers taking
%% 3 ms per operation, 1.8 duplicates per client operation before, 0.75 after.
-define(RESEND_AGE, 2).
-define(RELAY_AGE, 8).
%% A member that has not moved on an origin for STUCK_TICKS ticks while lacking some of its
%% operations is sent them by the first member alive that has them, once they are
%% RESEND_AGE ticks old there (see resend_due/2).
-define(STUCK_TICKS, ?RTO_TICKS).
-opaque state() :: #tcsb{}.
-type opts() :: #{window => pos_integer()}.

%% @doc A fresh member: nothing delivered. `Self' is this replica's `{node(), Incarnation}'.
-spec new(replica(), [node()]) -> state().
new(Self, Members) -> new(Self, Members, hm_vv:new()).

%% @doc A member that has delivered `Delivered' (after a restart or a state transfer).
-spec new(replica(), [node()], hm_vv:vv()) -> state().
new(Self, Members, Delivered) -> new(Self, Members, Delivered, #{}).

%% @doc {@link new/3} with options: `window', the most operations retransmitted to one member
%% at a time (default 1000).
-spec new(replica(), [node()], hm_vv:vv(), opts()) -> state().
new(Self = {Node, _}, Members, Delivered, Opts) ->
    see([Self | maps:keys(Delivered)],
        #tcsb{self = Self, members = lists:usort([Node | Members]),
              cb = hm_causal_buffer:new(Delivered),
              window = maps:get(window, Opts, ?RESEND_MAX)}).

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
receive_op(Msg, S) ->
    case receive_ready(Msg, S) of
        not_ready -> receive_unready(Msg, S);
        Ready -> Ready
    end.

%% @doc {@link receive_op/2} of a message ready on arrival that names only replicas
%% delivered from here (nearly every one on a busy table), or `not_ready' (then
%% {@link receive_unready/2} takes it). see/2 would learn nothing from such a message
%% (every replica delivered from was taken note of when it was first named), and a ready
%% message is delivered even when its origin is superseded. What it delivers has a valid
%% vector ({@link hm_causal_buffer:rcv_ready/2}).
-spec receive_ready(message(), state()) -> {[message()], state()} | not_ready.
receive_ready(Msg, S = #tcsb{cb = CB}) ->
    case hm_causal_buffer:rcv_ready(Msg, CB) of
        not_ready -> not_ready;
        Ready -> log_delivered(Ready, S)
    end.

%% @doc {@link receive_op/2} of a message {@link receive_ready/2} did not take: any new
%% replica it names is taken note of, then it is delivered, buffered, or (waiting on a
%% superseded origin) dropped.
-spec receive_unready(message(), state()) -> {[message()], state()}.
receive_unready(Msg = {Origin, Ts, _}, S0) ->
    S = #tcsb{cb = CB} = see(maps:keys(Ts), S0),
    case superseded(Origin, S) andalso
        not hm_causal_buffer:is_ready(Msg, hm_causal_buffer:delivered(CB)) of
        true -> {[], S};        % never buffered: see superseded/2
        false -> deliver(Msg, S)
    end.

deliver(Msg, S = #tcsb{cb = CB}) ->
    log_delivered(hm_causal_buffer:rcv_msg(Msg, CB), S).

%% What the causal buffer delivered is logged, and acknowledgements that waited for it
%% settle. What members have delivered is learned from their acknowledgements only, not
%% from these timestamps (Algorithm 1's ts_map): an operation may be relayed by
%% retransmission after its origin restarted as a new incarnation, and would teach stale
%% knowledge; an acknowledgement comes straight from the member, every tick (found by the
%% simulator).
log_ready({Ready, CB1}, S) ->
    S1 = lists:foldl(fun log_msg/2, S#tcsb{cb = CB1}, Ready),
    {Ready, settle_acks(S1)}.

%% log_ready/2 of a delivery: the acknowledgements waiting can settle only when an
%% operation of their sender was delivered (nothing else moves what they wait for).
log_delivered({[Msg = {Origin, _, _}], CB1}, S = #tcsb{early_acks = E}) ->
    %% the common case: the message alone, ready on arrival
    S1 = log_msg(Msg, S#tcsb{cb = CB1}),
    case E of
        #{Origin := Ack} -> {[Msg], settle_ack(Origin, Ack, S1)};
        _ -> {[Msg], S1}
    end;
log_delivered({Ready, CB1}, S = #tcsb{early_acks = E}) ->
    S1 = lists:foldl(fun log_msg/2, S#tcsb{cb = CB1}, Ready),
    case map_size(E) > 0 andalso lists:any(fun(M) -> is_map_key(element(1, M), E) end, Ready) of
        true -> {Ready, settle_acks(S1)};
        false -> {Ready, S1}
    end.

log_msg(Msg, S = #tcsb{log = L, ticks = T}) ->
    S#tcsb{log = hm_tcsb_log:append(Msg, T, L)}.

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
receive_ack(From = {Node, Inc}, V, New, S0) ->
    S = #tcsb{newest = Newest} = see([From | maps:keys(V)] ++ maps:to_list(New), S0),
    case Inc < maps:get(Node, Newest, Inc) of
        true -> S;                      % the late word of a gone incarnation: see drop_superseded/1
        false -> receive_current_ack(From, V, New, S)
    end.

receive_current_ack(From = {Node, Inc}, V, New, S = #tcsb{early_acks = E, acked = A, ticks = T,
                                                          has = H}) ->
    {V0, New0} = maps:get(From, E, {#{}, #{}}),
    %% receive_ack/4 let no gone incarnation through, and drop_superseded/1 left no entry of
    %% one: an entry is this incarnation's, or there is none yet
    H1 = case H of
             #{Node := {Inc, Old}} -> H#{Node := {Inc, hm_vv:join(Old, V)}};
             _ -> H#{Node => {Inc, V}}
         end,
    settle_acks(S#tcsb{early_acks = E#{From => {hm_vv:join(V0, V), join_newest(New0, New)}},
                       acked = A#{Node => T}, has = H1}).

%% The acknowledgement `Ack' of `Origin' that waits counts once this replica has delivered
%% every operation `Origin' sent before it. After a delivery of `Origin''s operation alone,
%% only that one can settle (a delivery moves only its origin's entry of the delivered
%% vector), so only that one is looked at.
settle_ack(Origin, Ack = {V, _}, S = #tcsb{early_acks = E, known = K, cb = CB}) ->
    case hm_vv:get(Origin, V) =< hm_vv:get(Origin, hm_causal_buffer:delivered(CB)) of
        true -> S#tcsb{early_acks = maps:remove(Origin, E), known = learn(Origin, Ack, K)};
        false -> S
    end.

%% Every waiting acknowledgement that counts now (settle_ack/3); one that still waits
%% changes nothing.
settle_acks(S = #tcsb{early_acks = E}) -> maps:fold(fun settle_ack/3, S, E).

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
%% (found by the simulator with slower relays). The same holds for a member whose copy was
%% removed: superseded/2 counts every origin of a node that is not a member as gone.
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
gc_dots(S) ->
    {Msgs, S1} = gc_ops(S),
    {[{O, maps:get(O, Ts)} || {O, Ts, _} <- Msgs], S1}.

%% @doc {@link gc/1}, also returning the operations it forgot.
-spec gc_ops(state()) -> {[message()], state()}.
gc_ops(S = #tcsb{log = L}) ->
    {Gone, Kept} = hm_tcsb_log:prune(stable(S), L),
    {Gone, S#tcsb{log = Kept}}.

%% @doc Every logged operation (delivered here, not yet stable), oldest first per origin: what
%% a state transfer hands on, so the receiver can repair others too.
-spec log_msgs(state()) -> [message()].
log_msgs(#tcsb{log = L}) -> hm_tcsb_log:msgs(L).

%% @doc Fold `Fun' over the logged messages (not yet stable), in no particular order, as
%% {@link lists:foldl/3} does, until it returns `{stop, Result}': `Result' is then the
%% answer. Nothing is copied: it stops after the messages it needed.
-spec fold_logged(fun((message(), Acc) -> Acc | {stop, Result}), Acc, state()) ->
          Acc | {stop, Result}.
fold_logged(Fun, Acc, #tcsb{log = L}) -> hm_tcsb_log:fold(Fun, Acc, L).

%% @doc Forget what member `Node' is known to have (it went down or came back, maybe as a new
%% incarnation): stability waits for its next acknowledgement, and so does retransmission
%% to it (what was in flight to it is lost).
-spec forget_member(node(), state()) -> state().
forget_member(Node, S = #tcsb{known = K, early_acks = E, has = H, flight = F, moved = Mv}) ->
    S#tcsb{known = maps:remove(Node, K), has = maps:remove(Node, H),
           flight = maps:remove(Node, F), moved = maps:remove(Node, Mv),
           feeding = maps:remove(Node, S#tcsb.feeding),
           early_acks = maps:filter(fun({N, _}, _) -> N =/= Node end, E)}.

%% @doc Put back logged operations read from disc or received in a state transfer (they are
%% delivered here).
-spec restore_log([message()], state()) -> state().
restore_log(Msgs, S) ->
    lists:foldl(fun log_msg/2, see([O || {_, Ts, _} <- Msgs, O <- maps:keys(Ts)], S), Msgs).

%% @doc Logged operations `Peer' has not reported it delivered, in causal order (each one is
%% deliverable at `Peer' once those before it are). `all' gives every one; `old' only those
%% logged at least `RESEND_AGE' ticks ago if this replica is their origin, `RELAY_AGE'
%% otherwise (a periodic safety net that does not resend what is still in flight or not
%% acknowledged yet, and leaves resending to the origin first).
-spec missing(node(), all | old, state()) -> [message()].
missing(Peer, Which, S) ->
    element(1, catch_up(reported(Peer, S), Which, infinity, S)).

%% @doc What member `Peer' reported it has delivered (its acknowledgements, settled or not:
%% where retransmission to it starts).
-spec reported(node(), state()) -> hm_vv:vv().
reported(Peer, #tcsb{has = H, known = K}) ->
    case H of
        #{Peer := {_, V}} -> hm_vv:join(V, known_vv(Peer, K));
        _ -> known_vv(Peer, K)
    end.

%% The causal-order walk: from the cut `From' (what the peer has, and what is in flight to
%% it), repeatedly take, origin by origin, the next logged operation that is due and ready
%% on top of what was taken; at most `Max'. Returns them and the cut they reach. An origin
%% stops at an operation not due (its operations are logged at nondecreasing ticks) or
%% missing from the log; an operation not ready waits for the other origins.
catch_up(From, Which, Max, S = #tcsb{self = {Node, _}, ticks = T}) when is_atom(Which) ->
    Due = fun(_, _) when Which =:= all -> true;
             ({N, _}, At) when N =:= Node -> At =< T - ?RESEND_AGE;
             (_, At) -> At =< T - ?RELAY_AGE
          end,
    catch_up(From, Due, Max, S);
catch_up(From, Due, Max, #tcsb{log = L}) ->
    hm_tcsb_log:walk(From, Due, Max, L).

%% @doc This tick's retransmission to `Peer': the next logged operations it has not reported
%% delivered and that are not in flight to it, in causal order, so that at most `window' are
%% in flight. A round the peer has not acknowledged within `RTO_TICKS' ticks was lost (a
%% busy connection dropped it, or a cut): the next round starts again from what it
%% reported.
-spec resend_due(node(), state()) -> {[message()], state()}.
resend_due(Peer, S0 = #tcsb{ticks = T, window = W0, flight = F,
                            self = {Node, _}}) ->
    case acked_lately(Peer, S0) of
        false -> {[], S0};
        true ->
            Has = reported(Peer, S0),
            Seen = maps:get(Peer, S0#tcsb.moved, #{}),
            S = #tcsb{moved = Mv} = note_moves(Peer, Has, S0#tcsb{log = hm_tcsb_log:sorted(S0#tcsb.log)}),
            Since = fun(O) -> element(2, maps:get(O, maps:get(Peer, Mv), {0, T})) end,
            {Front0, Rounds0, W1} = maps:get(Peer, F, {Has, [], W0}),
            %% stuck on origin `O': not moved on it for STUCK_TICKS, or moved only as far as
            %% this replica relayed it since it was
            Feeding0 = maps:get(Peer, S0#tcsb.feeding, #{}),
            Fed = fun(O) -> is_map_key(O, Feeding0)
                                andalso hm_vv:get(O, Has) =< hm_vv:get(O, Front0)
                  end,
            Stuck = fun(O) -> T - Since(O) >= ?STUCK_TICKS orelse Fed(O) end,
            %% whether `Peer' advanced on origin `O' within RESEND_AGE ticks, with no round of
            %% retransmission in flight to it (a member never seen before on `O' is not taken
            %% to advance; rounds go on as their acknowledgements allow)
            Advancing = fun(O) -> Rounds0 =:= [] andalso is_map_key(O, Seen)
                                      andalso T - Since(O) < ?RESEND_AGE
                        end,
            {Rounds1, Done} = lists:partition(fun({_, V}) -> not hm_vv:leq(V, Has) end, Rounds0),
            {Front, Rounds, W} =
                case Rounds1 of
                    [{At, V} | _] when T - At >= ?RTO_TICKS ->
                        %% not acknowledged in time: lost, unless the member is still
                        %% delivering what it covers (a member busy with a backlog
                        %% acknowledges late; going back would only send it duplicates)
                        case lists:any(fun({O, C}) -> C > hm_vv:get(O, Has)
                                                          andalso T - Since(O) < ?RTO_TICKS
                                       end, maps:to_list(V)) of
                            true -> {hm_vv:join(Has, Front0), Rounds1, W1};
                            false -> {Has, [], max(W0, W1 div 2)}      % lost: go back
                        end;
                    _ when Done =/= [] ->
                        {hm_vv:join(Has, Front0), Rounds1, min(W0 * ?MAX_WINDOW_FACTOR, W1 * 2)};
                    _ ->
                        {hm_vv:join(Has, Front0), Rounds1, W1}
                end,
            InFlight = maps:fold(fun(O, C, N) -> N + C - hm_vv:get(O, Has) end, 0, Front),
            Relay = relays(Peer, Has, S),
            %% of the logged origins silent or `Peer' is stuck on, those this replica is the
            %% first member alive to have more of than `Peer' (but their own node); and of
            %% those the silent ones
            Silent = fun({N, _}) -> silent(N, ?RESEND_AGE, S) end,
            Lacking = fun(O) -> hm_vv:get(O, Has) < hm_tcsb_log:highest(O, S#tcsb.log) end,
            First = first_relays(Peer, Has, fun(O) -> Lacking(O) andalso
                                                          (Silent(O) orelse Stuck(O))
                                            end, S),
            Quick = maps:filter(fun(O, _) -> Silent(O) end, First),
            %% this replica's own operations, and those it relays for a silent origin, as
            %% their origin resends them
            Due = fun(O = {N, _}, At) when N =:= Node; is_map_key(O, Quick) ->
                          At =< T - ?RESEND_AGE andalso
                              (not Advancing(O) orelse At =< T - 2 * ?RTO_TICKS);
                     (O, At) -> (Relay andalso At =< T - ?RELAY_AGE) orelse
                                    (At =< T - ?RESEND_AGE andalso Stuck(O)
                                     andalso is_map_key(O, First)) orelse
                                    (At =< T - ?RELAY_AGE andalso T - Since(O) >= ?RELAY_AGE)
                  end,
            {Msgs, Front1} = case W - InFlight of
                                 Room when Room > 0 -> catch_up(Front, Due, Room, S);
                                 _ -> {[], Front}
                             end,
            Rounds2 = case Msgs of
                          [] -> Rounds;
                          _ -> Rounds ++ [{T, Front1}]
                      end,
            %% once per origin relayed, not per operation (a round may carry thousands)
            Relayed = maps:from_keys([O || {O = {N, _}, _, _} <- Msgs, N =/= Node], true),
            Feeding = maps:from_list([{O, true} || O <- maps:keys(Feeding0), Fed(O)]
                                     ++ [{O, true} || O <- maps:keys(Relayed), Stuck(O)]),
            {Msgs, S#tcsb{flight = F#{Peer => {Front1, Rounds2, W}},
                          feeding = (S#tcsb.feeding)#{Peer => Feeding}}}
    end.

%% Whether this replica relays other origins' operations to `Peer' at once: it is the first
%% node among itself and the members other than `Peer' that acknowledged within SILENT_TICKS
%% and had, RELAY_AGE ticks ago, some operation `Peer' reported it lacks (`Has'). Every
%% member computes the same one while they see the same members alive and the same reports.
%% A member relays what it logged RELAY_AGE ticks ago, so a member that has nothing `Peer'
%% lacks, or got it only lately (restarted, or behind after a cut like `Peer'), cannot relay
%% yet and is passed over. One member relays every origin, in one causal walk: with a relay
%% per origin, an operation of one origin waited for another member to send the operation
%% of another origin it depends on, then for the acknowledgement, a few operations a tick.
relays(Peer, Has, S = #tcsb{self = {Node, _}}) ->
    Can = [M || M <- may_relay(Peer, S), not hm_vv:leq(reported_before(M, S), Has)],
    %% none: what `Peer' lacks is younger than RELAY_AGE everywhere (its origin resends it)
    Can =/= [] andalso Node =:= lists:min(Can).

%% The logged origins (those `Which' takes) of which `Peer' lacks an operation that this
%% replica is the first member to have, among those alive but the origin's node (looked at
%% only for the origins taken: a tick costs that for every member). When that node has been silent
%% for RESEND_AGE ticks (cut off, or down) it cannot resend them, so this replica relays them
%% as their origin would, without waiting RELAY_AGE ticks (a member that lacks one of them
%% cannot deliver what depends on it, from any origin); and so it does when `Peer' is stuck
%% on the origin (STUCK_TICKS), whoever else is alive: one member, not all of them, relays.
first_relays(Peer, Has, Which, S = #tcsb{self = {Node, _}, log = L, cb = CB}) ->
    Alive = [{M, case M of
                     Node -> hm_causal_buffer:delivered(CB);
                     _ -> reported(M, S)
                 end} || M <- may_relay(Peer, S)],
    maps:from_list(
      [{O, true} || O = {N, _} <- hm_tcsb_log:origins(L), N =/= Node, N =/= Peer, Which(O),
                    begin
                        Lacks = hm_vv:get(O, Has),
                        Can = [M || {M, V} <- Alive, M =/= N, hm_vv:get(O, V) > Lacks],
                        Can =/= [] andalso Node =:= lists:min(Can)
                    end]).

%% The members that may relay to `Peer': this replica, and the others alive (acknowledging
%% within SILENT_TICKS) but `Peer'.
may_relay(Peer, S = #tcsb{self = {Node, _}, members = Ms}) ->
    [M || M <- Ms, M =/= Peer, M =:= Node orelse acked_lately(M, S)].

%% What member `M' reported at least RELAY_AGE ticks ago (as far as this replica heard then):
%% it logged those operations at least that long ago, so they are due for relaying there.
%% For this replica itself, what it had delivered RELAY_AGE ticks ago; for another member,
%% what it reported RELAY_AGE - 1 ticks ago: its report arrives here about a tick after it
%% delivered, and every member must see the same relay (with the same age for both, a
%% member counted itself a tick before the others counted it, and two relayed for a tick:
%% 25 % more operations received twice in the simulator's full-load family; with one more
%% tick for itself, none relayed for a tick, and the family converged 8 % slower).
reported_before(M, #tcsb{past = P, ticks = T, self = {Node, _}}) ->
    Age = case M of
              Node -> ?RELAY_AGE;
              _ -> ?RELAY_AGE - 1
          end,
    case P of
        #{M := {_, Hist}} ->
            case [V || {At, V} <- Hist, At =< T - Age] of
                [V | _] -> V;
                [] -> #{}
            end;
        _ -> #{}
    end.

%% Note what every member reports at this tick (reported_before/2), for its current
%% incarnation; keep the reports newer than RELAY_AGE ticks and the newest older one.
note_reports(S = #tcsb{self = {Node, Self}, members = Ms, has = H, past = P, ticks = T,
                        cb = CB}) ->
    P1 = lists:foldl(
           fun(M, Acc) ->
                   case H#{Node => {Self, none}} of
                       #{M := {Inc, _}} ->
                           V = case M of
                                   Node -> hm_causal_buffer:delivered(CB);
                                   _ -> reported(M, S)
                               end,
                           Hist = case Acc of
                                      #{M := {Inc, [{_, V} | _] = Same}} -> Same;
                                      #{M := {Inc, Old}} -> [{T, V} | Old];
                                      _ -> [{T, V}]
                                  end,
                           Acc#{M => {Inc, trim_reports(Hist, T)}};
                       _ -> Acc
                   end
           end, maps:with(Ms, P), Ms),
    S#tcsb{past = P1}.

trim_reports([E = {At, _} | Rest], T) when At > T - ?RELAY_AGE -> [E | trim_reports(Rest, T)];
trim_reports([E | _], _) -> [E];
trim_reports([], _) -> [].

%% For every origin logged here or reported by `Peer', what `Peer' reported of it and the tick
%% that last changed (an origin that enters the log here has been tracked since `Peer' first
%% reported it: a member stuck on it is seen stuck at once).
note_moves(Peer, Has, S = #tcsb{log = L, moved = Mv, ticks = T}) ->
    Old = maps:get(Peer, Mv, #{}),
    New = maps:map(fun(O, _) ->
                           Seq = hm_vv:get(O, Has),
                           case Old of
                               #{O := {Seq, _} = Same} -> Same;
                               _ -> {Seq, T}
                           end
                   end, maps:merge(Has, maps:from_keys(hm_tcsb_log:origins(L), logged))),
    S#tcsb{moved = Mv#{Peer => New}}.

%% Whether member `M' acknowledged within the last SILENT_TICKS ticks: only such a member is
%% sent retransmissions, or relays. Unlike silent/3, a member never heard from is not.
acked_lately(M, S) -> acked_within(M, ?SILENT_TICKS, S).

%% @doc Whether member `M' acknowledged within the last `Ticks' ticks (false when it was
%% never heard from).
-spec acked_within(node(), non_neg_integer(), state()) -> boolean().
acked_within(M, Ticks, #tcsb{acked = A, ticks = T}) ->
    case A of
        #{M := At} -> T - At =< Ticks;
        _ -> false
    end.

%% @doc How many of this replica's own operations member `M' has not delivered, as far as its
%% acknowledgements tell: `unknown' when none was heard since what it had was last
%% forgotten ({@link forget_member/2}).
-spec lag(node(), state()) -> non_neg_integer() | unknown.
lag(M, #tcsb{self = Self, has = H, known = K, cb = CB}) ->
    Own = hm_vv:get(Self, hm_causal_buffer:delivered(CB)),
    case {H, K} of
        {#{M := {_, V}}, _} ->
            max(0, Own - max(hm_vv:get(Self, V), hm_vv:get(Self, known_vv(M, K))));
        {_, #{M := {_, V, _}}} -> max(0, Own - hm_vv:get(Self, V));
        _ -> unknown
    end.

%% @doc How many operations member `M' reported (in its acknowledgements) it has delivered
%% that this replica has not: how far this replica is behind it.
-spec behind(node(), state()) -> non_neg_integer().
behind(M, S = #tcsb{cb = CB}) ->
    hm_vv:missing(reported(M, S), hm_causal_buffer:delivered(CB)).

%% @doc Catching up by state: count as delivered what a member delivered, `V', whose state
%% the layer above joined into this replica's. Returns the buffered operations that became
%% deliverable on top of that, in causal order (to be applied as received ones are). The
%% operations `V' brings are not logged here: their origin logs them, and so does every
%% replica that received them as operations, until they are stable; a replica that lacks
%% one that only replicas caught up by state still have takes their state in turn (the
%% layer above: hm_ec_table).
-spec merge(hm_vv:vv(), state()) -> {[message()], state()}.
merge(V, S0) ->
    S = #tcsb{cb = CB} = see(maps:keys(V), S0),
    log_ready(hm_causal_buffer:advance(V, CB), S).

%% @doc Whether member `Node' has been silent for more than `Ticks' ticks: its last
%% acknowledgement heard here is older (a member whose copy runs acknowledges at least every
%% few ticks; a silent one is down, restarting, or has not loaded the table yet). False when
%% none was heard since this replica started: nothing is known of it.
-spec silent(node(), non_neg_integer(), state()) -> boolean().
silent(Node, Ticks, #tcsb{acked = A, ticks = T}) ->
    case A of
        #{Node := At} -> T - At > Ticks;
        _ -> false
    end.

%% @doc Advance the logical tick used by {@link missing/3}.
-spec tick(state()) -> state().
tick(S) ->
    S1 = #tcsb{ticks = T} = note_reports(S),
    S1#tcsb{ticks = T + 1}.

%% Take note of replicas (`{Node, Incarnation}') heard of: a newer incarnation of a node
%% supersedes the older ones (incarnations grow with time, hm_ec_server).
see(Replicas, S = #tcsb{newest = New}) ->
    case any_newer(Replicas, New) of
        false -> S;                     % the common case: nothing new
        true -> see_newer(Replicas, S)
    end.

any_newer([{N, Inc} | Rest], New) when is_atom(N), Inc =/= removed ->
    case New of
        #{N := Cur} when Cur >= Inc -> any_newer(Rest, New);
        _ -> true
    end;
any_newer([_ | Rest], New) -> any_newer(Rest, New);
any_newer([], _) -> false.

see_newer(Replicas, S = #tcsb{newest = New}) ->
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

%% @doc Whether origin `{Node, Incarnation}' is gone: a newer incarnation of its node was
%% heard of, or its node is no longer a member (it sends no more operations).
-spec superseded({node(), term()}, state()) -> boolean().
superseded({N, Inc}, #tcsb{members = Ms, newest = New}) ->
    Inc < maps:get(N, New, Inc) orelse not lists:member(N, Ms).

%% A node that restarted without its state is a new incarnation, and its old one sends no
%% more. From the moment this replica hears of the new one, it delivers an operation of the
%% old one only when it is ready on arrival, and drops those buffered: such an operation waits
%% for an earlier one of the old incarnation. If a member delivered that earlier one, it still
%% logs and resends it, then the later one (so dropping loses nothing that member has); if no
%% member did, both died with the crash, as async_ec allows for a ram_copies node
%% (docs/guide.md, limits). This keeps what superseded incarnations can still deliver
%% anywhere known to settled/1, and the causal buffer from keeping them forever.
%%
%% What an older incarnation of a node acknowledged is forgotten too, and its late
%% acknowledgements are ignored (receive_ack/4): its state is gone (a restart without it, or
%% Mnesia alone restarted on that node), and the new incarnation may have installed a state
%% that lacks operations the old one had; counted for stability, the old word would let them
%% be folded while the new incarnation can still issue operations concurrent with them
%% (found by the simulator with Mnesia restarts, which give no nodedown).
drop_superseded(S0 = #tcsb{newest = New, known = K, has = H, early_acks = E}) ->
    Old = fun(N, Inc) -> Inc < maps:get(N, New, Inc) end,
    S = #tcsb{cb = CB} =
        S0#tcsb{known = maps:filter(fun(N, {Inc, _, _}) -> not Old(N, Inc) end, K),
                has = maps:filter(fun(N, {Inc, _}) -> not Old(N, Inc) end, H),
                past = maps:filter(fun(N, {Inc, _}) -> not Old(N, Inc) end, S0#tcsb.past),
                early_acks = maps:filter(fun({N, Inc}, _) -> not Old(N, Inc) end, E)},
    case hm_causal_buffer:pending_count(CB) of
        0 -> S;
        _ -> S#tcsb{cb = hm_causal_buffer:drop_origins(fun(O) -> superseded(O, S) end, CB)}
    end.

%% @doc Change the members (copy holders): a removed member no longer holds stability back.
-spec set_members([node()], state()) -> state().
set_members(Ms, S = #tcsb{self = {Node, _}, members = Old, known = K, early_acks = E,
                          has = H, flight = F, moved = Mv}) ->
    Ms1 = lists:usort([Node | Ms]),
    S1 = S#tcsb{members = Ms1, known = maps:with(Ms1, K), has = maps:with(Ms1, H),
                flight = maps:with(Ms1, F), moved = maps:with(Ms1, Mv),
                feeding = maps:with(Ms1, S#tcsb.feeding), past = maps:with(Ms1, S#tcsb.past),
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
log_size(#tcsb{log = L}) -> hm_tcsb_log:count(L).

%% @doc Operations received but not deliverable yet.
-spec pending(state()) -> non_neg_integer().
pending(#tcsb{cb = CB}) -> hm_causal_buffer:pending_count(CB).

%% @doc What each member is known to have delivered.
-spec known(state()) -> #{node() => hm_vv:vv()}.
known(#tcsb{known = K}) -> maps:map(fun(_, {_, V, _}) -> V end, K).

%% @doc What retransmission works from, for inspection: this replica's tick, the newest
%% incarnation heard of per node, per member the tick of its last acknowledgement, what it
%% reported delivered and the rounds in flight to it (`{Cut, [{Tick, Cut}], Window}'), and
%% per logged origin the range of sequence numbers logged.
-spec retransmission(state()) -> map().
retransmission(#tcsb{ticks = T, newest = New, acked = A, has = H, flight = F, log = L}) ->
    #{tick => T, newest => New, acked => A, reported => H, flight => F,
      logged => hm_tcsb_log:ranges(L)}.
