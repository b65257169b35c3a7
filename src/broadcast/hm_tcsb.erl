%% @doc Tagged causal stable broadcast, pure (the Hypermnesia paper, *Hypermnesia: Eventual
%% Consistency in Mnesia*, §4.3–4.8, Algorithm 1, after Baquero, Almeida and Shoker, *Making
%% Operation-based CRDTs Operation-based*), with the extensions a partition-tolerant table
%% needs: retransmission and eager acknowledgements.
%%
%% One state per EC table and node; the members are the table's copy holders. Functions take
%% the state and return the new state and the messages to send (`[{Node, Msg}]'); the server
%% ({@link hm_ec_server}) only sends them. This module is the one the rest of Hypermnesia
%% calls. It holds causal delivery and causal stability, and keeps two parts of its state in
%% the modules that own them:
%% <ul>
%% <li>{@link hm_tcsb_log}: every operation delivered here, kept until it is stable, per
%% origin in sequence order, so that any member can repair any other after a
%% partition.</li>
%% <li>{@link hm_tcsb_resend}: what to retransmit to each member, and when, and which member
%% relays the operations of others; it works from what members reported in their
%% acknowledgements, settled or not.</li>
%% </ul>
%% The steps:
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
%% incarnation may still arrive (settled/1, below). {@link gc/1} then drops the stable
%% operations from the log.</li>
%% <li>{@link tick/1}, {@link resend_due/2}, {@link missing/3}: retransmission
%% ({@link hm_tcsb_resend}). A member is sent what it reported it lacks, in causal order,
%% with a window of operations in flight that adapts to what the member and the link
%% take.</li>
%% <li>{@link give_up/3}, {@link lacks_given_up/2}: a bound on the log. A member that stays
%% unreachable would make every other one keep every operation made since it left; past
%% the bound, what every reachable member has delivered leaves the log, stable or not, and
%% the members it was kept for catch up by state when they return (the layer above sends it
%% to them; retransmission to them stops, see {@link resend_due/2}). Only the log is
%% bounded: stability still waits for every member, so no operation concurrent with one a
%% member has not delivered is ever folded, and a state joins as {@link merge/2} says.</li>
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
%% stability can wait until every member has caught up on them (an operation of a gone
%% incarnation, still resent from logs, could otherwise arrive after one concurrent with it
%% was folded as stable: see settled/1).
%%
%% Invariants: a logged operation is delivered here; every operation delivered here as an
%% operation (not by state) is logged until stable; the log holds no stable operation after
%% {@link gc/1}; `known' only grows for a member incarnation; no operation of a gone
%% incarnation stays buffered. Retransmission keeps its own ({@link hm_tcsb_resend}).
-module(hm_tcsb).

%% the steps of Algorithm 1, and acknowledgements
-export([new/2, new/3, new/4, broadcast/2, receive_op/2, receive_ready/2, receive_unready/2,
         acks/1, receive_ack/4, stable/1, merge/2, behind/2]).
%% members and incarnations
-export([set_members/2, forget_member/2, superseded/2]).
%% the log, and its bound
-export([gc/1, gc_dots/1, gc_ops/1, restore_log/2, log_msgs/1, fold_logged/3, log_size/1,
         give_up/3, lacks_given_up/2, given_up/1]).
%% retransmission
-export([tick/1, resend_due/2, missing/3, reported/2, lag/2, acked_within/3, silent/3]).
%% inspection
-export([self/1, members/1, delivered/1, pending/1, known/1, retransmission/1]).
-export_type([state/0, message/0, opts/0]).

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
               %% every operation in it left the log, stable or given up on (give_up/3)
               given_up = #{} :: hm_vv:vv(),
               %% what members reported, what is in flight to them, who relays to them
               rs :: hm_tcsb_resend:state()}).

-opaque state() :: #tcsb{}.
-type opts() :: #{window => pos_integer()}.

%%% ---------------------------------------------------------------- delivery

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
              cb = hm_causal_buffer:new(Delivered), rs = hm_tcsb_resend:new(Opts)}).

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
%% knowledge; an acknowledgement comes straight from the member, every tick.
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

%% @doc How many operations member `M' reported (in its acknowledgements) it has delivered
%% that this replica has not: how far this replica is behind it.
-spec behind(node(), state()) -> non_neg_integer().
behind(M, S = #tcsb{cb = CB}) ->
    hm_vv:missing(reported(M, S), hm_causal_buffer:delivered(CB)).

%%% ---------------------------------------------------------------- stability

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

receive_current_ack(From, V, New, S = #tcsb{early_acks = E, ticks = T, rs = RS}) ->
    {V0, New0} = maps:get(From, E, {#{}, #{}}),
    settle_acks(S#tcsb{early_acks = E#{From => {hm_vv:join(V0, V), join_newest(New0, New)}},
                       rs = hm_tcsb_resend:note_ack(From, V, T, RS)}).

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
%% here after an operation concurrent with them was folded as stable: replicas diverge.
%% The same holds for a member whose copy was
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

%%% ---------------------------------------------------------------- incarnations and members

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
%% (docs/limits.md). This keeps what superseded incarnations can still deliver
%% anywhere known to settled/1, and the causal buffer from keeping them forever.
%%
%% What an older incarnation of a node acknowledged is forgotten too, and its late
%% acknowledgements are ignored (receive_ack/4): its state is gone (a restart without it, or
%% Mnesia alone restarted on that node), and the new incarnation may have installed a state
%% that lacks operations the old one had; counted for stability, the old word would let them
%% be folded while the new incarnation can still issue operations concurrent with them
%% (Mnesia restarted alone gives no nodedown: the newer incarnation is the only sign).
drop_superseded(S0 = #tcsb{newest = New, known = K, early_acks = E, rs = RS}) ->
    Old = fun(N, Inc) -> Inc < maps:get(N, New, Inc) end,
    S = #tcsb{cb = CB} =
        S0#tcsb{known = maps:filter(fun(N, {Inc, _, _}) -> not Old(N, Inc) end, K),
                rs = hm_tcsb_resend:drop_superseded(Old, RS),
                early_acks = maps:filter(fun({N, Inc}, _) -> not Old(N, Inc) end, E)},
    case hm_causal_buffer:pending_count(CB) of
        0 -> S;
        _ -> S#tcsb{cb = hm_causal_buffer:drop_origins(fun(O) -> superseded(O, S) end, CB)}
    end.

%% @doc Change the members (copy holders): a removed member no longer holds stability back.
-spec set_members([node()], state()) -> state().
set_members(Ms, S = #tcsb{self = {Node, _}, members = Old, known = K, early_acks = E,
                          rs = RS}) ->
    Ms1 = lists:usort([Node | Ms]),
    S1 = S#tcsb{members = Ms1, known = maps:with(Ms1, K),
                rs = hm_tcsb_resend:set_members(Ms1, RS),
                early_acks = maps:filter(fun({N, _}, _) -> lists:member(N, Ms1) end, E)},
    case Ms1 =:= Old of
        true -> S1;
        false -> drop_superseded(S1)        % a removed member's incarnations are gone
    end.

%% @doc Forget what member `Node' is known to have (it went down or came back, maybe as a new
%% incarnation): stability waits for its next acknowledgement, and so does retransmission
%% to it (what was in flight to it is lost).
-spec forget_member(node(), state()) -> state().
forget_member(Node, S = #tcsb{known = K, early_acks = E, rs = RS}) ->
    S#tcsb{known = maps:remove(Node, K), rs = hm_tcsb_resend:forget_member(Node, RS),
           early_acks = maps:filter(fun({N, _}, _) -> N =/= Node end, E)}.

%%% ---------------------------------------------------------------- log

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

%% @doc The bound on the log: when it holds more than `Limit' operations, those that every
%% member heard from within the last `Silent' ticks reported it has delivered leave it, whether or not
%% the members that were silent longer have them (stable ones leave it anyway, {@link gc/1}).
%% Returns the operations that left it. A member that lacks one of them catches up by
%% state ({@link lacks_given_up/2}); stability is not changed. `infinity': no bound.
%%
%% Once every silent member lacks an operation that left the log, they leave it at every
%% call, under the bound too: those members take a state anyway, and the log then holds only
%% what the members heard from lack, not up to `Limit' operations that nobody will be sent
%% (a long cut under load would otherwise fill it again and again, and each time empty it
%% at once, which holds the replica's process for as long).
-spec give_up(pos_integer() | infinity, non_neg_integer(), state()) -> {[message()], state()}.
give_up(infinity, _, S) -> {[], S};
give_up(Limit, Silent, S = #tcsb{self = {Node, _}, members = Ms, cb = CB, log = L,
                                 given_up = G}) ->
    %% a member never heard from since this replica started is not silent: nothing
    %% is known of it, so what it has is known as nothing, and nothing leaves
    {Heard, Quiet} = lists:partition(fun(M) -> not silent(M, Silent, S) end, Ms -- [Node]),
    case hm_tcsb_log:count(L) > Limit orelse
        (Quiet =/= [] andalso lists:all(fun(M) -> lacks_given_up(M, S) end, Quiet)) of
        false -> {[], S};
        true ->
            %% what a member reported, settled or not: the log is kept for retransmission,
            %% and a member has what it reported (stability waits for settled reports)
            V = lists:foldl(fun(M, Acc) -> hm_vv:meet(Acc, reported(M, S)) end,
                            hm_causal_buffer:delivered(CB), Heard),
            case hm_tcsb_log:prune(V, L) of
                {[], _} -> {[], S};
                {Gone, Kept} -> {Gone, S#tcsb{log = Kept, given_up = hm_vv:join(G, V)}}
            end
    end.

%% @doc Whether member `M' lacks an operation that left the log here without being stable
%% ({@link give_up/3}), as far as what it reported tells: then it cannot catch up by
%% operations from here, and takes this replica's state instead.
-spec lacks_given_up(node(), state()) -> boolean().
lacks_given_up(_M, #tcsb{given_up = G}) when map_size(G) =:= 0 -> false;
lacks_given_up(M, S = #tcsb{given_up = G}) -> not hm_vv:leq(G, reported(M, S)).

%% @doc Every operation in this vector left the log, stable or given up on
%% ({@link give_up/3}): once it is stable, no member lacks one that left it unstable.
-spec given_up(state()) -> hm_vv:vv().
given_up(#tcsb{given_up = G}) -> G.

%% @doc Put back logged operations read from disc or received in a state transfer (they are
%% delivered here).
-spec restore_log([message()], state()) -> state().
restore_log(Msgs, S) ->
    lists:foldl(fun log_msg/2, see([O || {_, Ts, _} <- Msgs, O <- maps:keys(Ts)], S), Msgs).

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

-spec log_size(state()) -> non_neg_integer().
log_size(#tcsb{log = L}) -> hm_tcsb_log:count(L).

%%% ---------------------------------------------------------------- retransmission

%% @doc Advance the logical tick retransmission counts in ({@link missing/3},
%% {@link resend_due/2}), once it noted what every member reports at the tick ending.
-spec tick(state()) -> state().
tick(S = #tcsb{ticks = T, rs = RS}) ->
    S#tcsb{rs = hm_tcsb_resend:note_reports(view(S), RS), ticks = T + 1}.

%% What of this state retransmission reads.
view(S = #tcsb{self = Self, members = Ms, ticks = T, cb = CB, log = L}) ->
    hm_tcsb_resend:view(Self, Ms, T, hm_causal_buffer:delivered(CB), known(S), L).

%% @doc Logged operations `Peer' has not reported it delivered, in causal order (each one is
%% deliverable at `Peer' once those before it are). `all' gives every one; `old' only those
%% old enough to resend, or to relay when this replica is not their origin
%% ({@link hm_tcsb_resend:missing/4}).
-spec missing(node(), all | old, state()) -> [message()].
missing(Peer, Which, S = #tcsb{rs = RS}) ->
    hm_tcsb_resend:missing(Peer, Which, view(S), RS).

%% @doc This tick's retransmission to `Peer' ({@link hm_tcsb_resend:resend_due/3}): the next
%% logged operations it has not reported delivered and that are not in flight to it, in
%% causal order, at most its window in flight. A round the peer has not acknowledged in
%% time was lost (a busy connection dropped it, or a cut): the next round starts again from
%% what it reported.
%% Nothing to a peer that lacks what left the log unstable ({@link lacks_given_up/2}): what
%% follows would wait at the peer for what it cannot get from here; it takes a state.
-spec resend_due(node(), state()) -> {[message()], state()}.
resend_due(Peer, S = #tcsb{rs = RS}) ->
    case lacks_given_up(Peer, S) of
        true -> {[], S};
        false ->
            {Msgs, L, RS1} = hm_tcsb_resend:resend_due(Peer, view(S), RS),
            {Msgs, S#tcsb{log = L, rs = RS1}}
    end.

%% @doc What member `Peer' reported it has delivered (its acknowledgements, settled or not:
%% where retransmission to it starts).
-spec reported(node(), state()) -> hm_vv:vv().
reported(Peer, #tcsb{known = K, rs = RS}) ->
    hm_tcsb_resend:reported(Peer, known_vv(Peer, K), RS).

%% @doc How many of this replica's own operations member `M' has not delivered, as far as its
%% acknowledgements tell: `unknown' when none was heard since what it had was last
%% forgotten ({@link forget_member/2}).
-spec lag(node(), state()) -> non_neg_integer() | unknown.
lag(M, #tcsb{self = Self, known = K, cb = CB, rs = RS}) ->
    Own = hm_vv:get(Self, hm_causal_buffer:delivered(CB)),
    case {hm_tcsb_resend:report(M, RS), K} of
        {none, #{M := {_, V, _}}} -> max(0, Own - hm_vv:get(Self, V));
        {none, _} -> unknown;
        {V, _} -> max(0, Own - max(hm_vv:get(Self, V), hm_vv:get(Self, known_vv(M, K))))
    end.

%% @doc Whether member `M' acknowledged within the last `Ticks' ticks (false when it was
%% never heard from).
-spec acked_within(node(), non_neg_integer(), state()) -> boolean().
acked_within(M, Ticks, #tcsb{ticks = T, rs = RS}) ->
    hm_tcsb_resend:acked_within(M, Ticks, T, RS).

%% @doc Whether member `Node' has been silent for more than `Ticks' ticks: its last
%% acknowledgement heard here is older (a member whose copy runs acknowledges at least every
%% few ticks; a silent one is down, restarting, or has not loaded the table yet). False when
%% none was heard since this replica started: nothing is known of it.
-spec silent(node(), non_neg_integer(), state()) -> boolean().
silent(Node, Ticks, #tcsb{ticks = T, rs = RS}) ->
    hm_tcsb_resend:silent(Node, Ticks, T, RS).

%%% ---------------------------------------------------------------- inspection

-spec self(state()) -> replica().
self(#tcsb{self = Self}) -> Self.

-spec members(state()) -> [node()].
members(#tcsb{members = Ms}) -> Ms.

-spec delivered(state()) -> hm_vv:vv().
delivered(#tcsb{cb = CB}) -> hm_causal_buffer:delivered(CB).

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
retransmission(#tcsb{ticks = T, newest = New, log = L, rs = RS}) ->
    maps:merge(#{tick => T, newest => New, logged => hm_tcsb_log:ranges(L)},
               hm_tcsb_resend:info(RS)).
