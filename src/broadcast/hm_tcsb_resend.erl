%% @doc Retransmission and relaying for the tagged causal stable broadcast ({@link hm_tcsb}):
%% what this replica resends to each member, when, and which member relays operations of
%% other origins. Algorithm 1 of the Hypermnesia paper (*Hypermnesia: Eventual Consistency in
%% Mnesia*, §4.3–4.8) assumes reliable delivery; this module provides it over links that
%% drop and partitions that cut, so that replicas converge once a partition heals (§4.10–4.12).
%%
%% Pure: functions take this module's state and a {@link view()} of the broadcast (this
%% replica, the members, the tick, what it delivered, what each member is known to have
%% delivered, the log of {@link hm_tcsb_log}) and return the new state, the messages to send
%% and, for {@link resend_due/3}, the log to keep.
%%
%% What retransmission works from is the members' acknowledgements as they arrive, settled
%% or not ({@link hm_tcsb} counts an acknowledgement for stability only once the sender's own
%% earlier operations were delivered here): starting from settled ones instead deadlocks
%% after a partition under load, each side's acknowledgements waiting for the very
%% operations the other side would resend.
%% <ul>
%% <li>{@link note_ack/4}: an acknowledgement arrived: what its member reported and when.</li>
%% <li>{@link note_reports/2}: at every tick, what every member reports, kept for
%% {@link resend_due/3} to choose the relay by what members had some ticks ago.</li>
%% <li>{@link resend_due/3}: this tick's retransmission to one member.</li>
%% <li>{@link missing/4}: every logged operation a member lacks, or those old enough (when a
%% member comes back).</li>
%% </ul>
%%
%% Invariants: what a member reported only grows for a member incarnation (a newer
%% incarnation replaces it, an older one's word is never noted); every operation sent to a
%% member is ready there once those sent before it arrived (every round continues a causal
%% walk from what the member reported); at most a window of operations is in flight to a
%% member; a member that has not acknowledged within SILENT_TICKS is sent nothing and relays
%% nothing.
-module(hm_tcsb_resend).

-export([new/1, view/6, note_ack/4, note_reports/2, resend_due/3, missing/4, reported/3,
         report/2, acked_within/4, silent/4, set_members/2, forget_member/2,
         drop_superseded/2, info/1]).
-export_type([state/0, view/0]).

-type message() :: hm_causal_buffer:message().
-type replica() :: {node(), term()}.
-type tick() :: non_neg_integer().

%% Distribution is reliable while connected but, under load, drops what is sent to a busy
%% connection (`nosuspend'), and a partition loses what was in flight; so every member, every
%% tick, sends each reachable member the logged operations that member reported (in its last
%% acknowledgement, settled or not) it has not delivered: in causal order, so that every one
%% is deliverable on arrival whatever the window cuts off; at most a window of them in flight
%% per member, continuing where the last round stopped; and going back to what the member
%% reported when a round is not acknowledged within RTO_TICKS and what the member reported of
%% the round's origins did not move meanwhile (it was lost; a member still delivering is only
%% late, busy with a backlog). The window adapts as TCP's does: it starts at `window'
%% (default RESEND_MAX), doubles when a round is acknowledged in time, up to
%% MAX_WINDOW_FACTOR times that, and halves, down to the start, when a round is lost: a
%% backlog of any size drains at what the member and the link can take. Only to a member
%% that acknowledged within SILENT_TICKS: a silent one (down, or not tracking the table yet,
%% e.g. restarting) would only drop them.
-define(RESEND_MAX, 1000).
-define(RTO_TICKS, 4).
-define(MAX_WINDOW_FACTOR, 64).
-define(SILENT_TICKS, 8).
%% An operation is resent periodically only once it is RESEND_AGE ticks old: a member
%% acknowledges once a tick, so a younger one is most likely delivered there and merely not
%% acknowledged yet, and resending it would mostly send duplicates. Its origin resends it;
%% any other member that logs it relays it only from RELAY_AGE ticks on, for when the origin
%% is cut off or restarted without it (were every member to relay at once, each would send
%% every operation to every member). And only one member relays to a given member, every
%% origin in one causal walk: the first node among the members alive (acknowledging within
%% SILENT_TICKS) other than that member that had, RELAY_AGE ticks ago, something that member
%% lacks (relays/4); after a heal, with every member relaying the whole backlog to the other
%% side, each operation would arrive N-1 times. The relay is chosen by what members had
%% RELAY_AGE ticks ago, not by what they have now: chosen by what they have now, per origin,
%% a member catching up itself could be the relay, with nothing old enough to relay, while
%% those that had everything waited for it, and the member behind would get a few operations
%% a tick, from origins each waiting for another's. Every member relays an origin once the
%% member has not moved on it for RELAY_AGE ticks (the relay cannot reach it).
%%
%% An origin silent for RESEND_AGE ticks (cut off, or down) cannot resend: the first member
%% alive that has what a member lacks of it relays those operations as their origin would,
%% at RESEND_AGE (first_relays/5), since a member lacking one cannot deliver what depends on
%% it, from any origin. So does that member for a member stuck on an origin, one that has not
%% moved on it for STUCK_TICKS ticks, whoever is alive: neither the origin nor the relay
%% reaches it. It goes on relaying that origin while the member gets none of it beyond what
%% was sent from here. After a heal the connections between some nodes can stay silent for
%% seconds while TCP's retransmission timer, backed off during the cut, runs out, and a node
%% whose connections are both back is the only way through: waiting RELAY_AGE ticks, a member
%% stuck on one origin would hold back every operation depending on it, and the other
%% members' writers would wait on flow control (hm_sim_tests checks a copy catches up around
%% a silent connection).
%%
%% With no retransmission round in flight to a member, an origin resends its own operation
%% to it only once the member has not advanced on the origin for RESEND_AGE ticks, or once
%% the operation is 2 * RTO_TICKS old: a member busy with a backlog holds operations it
%% received and has not applied yet, and acknowledges only what it applied, so resending at
%% RESEND_AGE whatever the member is doing would send it mostly duplicates.
-define(RESEND_AGE, 2).
-define(RELAY_AGE, 8).
%% A member that has not moved on an origin for STUCK_TICKS ticks while lacking some of its
%% operations is sent them by the first member alive that has them, once they are
%% RESEND_AGE ticks old there (see resend_due/3).
-define(STUCK_TICKS, ?RTO_TICKS).

-record(resend, {
          %% per member node: its incarnation and what it reported it has delivered in its
          %% acknowledgements, settled or not (where retransmission starts)
          has = #{} :: #{node() => {term(), hm_vv:vv()}},
          %% per member: the tick of its last acknowledgement
          acked = #{} :: #{node() => tick()},
          %% per member: retransmission in flight (the cut it reaches, the rounds not
          %% acknowledged yet, oldest first) and the member's window; see resend_due/3
          flight = #{} :: #{node() => {hm_vv:vv(), [{tick(), hm_vv:vv()}], pos_integer()}},
          %% per member, and origin logged here or reported by the member: what the member
          %% reported of that origin, and the tick that last changed (resend_due/3: is a late
          %% round lost, is the member stuck on that origin?)
          moved = #{} :: #{node() => #{replica() => {non_neg_integer(), tick()}}},
          %% per member: the origins this replica relays to it because it was stuck on them,
          %% for as long as it gets nothing of them beyond what was sent from here
          feeding = #{} :: #{node() => #{replica() => true}},
          %% per member node: its incarnation and what it reported at the last ticks, newest
          %% first, back to the newest report at least RELAY_AGE ticks old (relays/4: what a
          %% member has logged that long is what it relays)
          past = #{} :: #{node() => {term(), [{tick(), hm_vv:vv()}]}},
          %% the window a member starts at, and the least it halves to
          window = ?RESEND_MAX :: pos_integer()}).
-opaque state() :: #resend{}.

%% What of the broadcast's state retransmission reads: this replica, the members, the
%% current tick, what this replica delivered, what each member is known to have delivered
%% (its settled acknowledgements), and the log.
-record(view, {self :: replica(),
               members :: [node()],
               tick :: tick(),
               delivered :: hm_vv:vv(),
               known :: #{node() => hm_vv:vv()},
               log :: hm_tcsb_log:log()}).
-opaque view() :: #view{}.

%% @doc Nothing heard from any member yet; `window' (default 1000) is the most operations
%% sent to one member at a time while nothing was acknowledged in time.
-spec new(hm_tcsb:opts()) -> state().
new(Opts) -> #resend{window = maps:get(window, Opts, ?RESEND_MAX)}.

%% @doc The view of the broadcast retransmission reads (see {@link view()}).
-spec view(replica(), [node()], tick(), hm_vv:vv(), #{node() => hm_vv:vv()},
           hm_tcsb_log:log()) -> view().
view(Self, Members, Tick, Delivered, Known, Log) ->
    #view{self = Self, members = Members, tick = Tick, delivered = Delivered, known = Known,
          log = Log}.

%% @doc Member `{Node, Inc}' acknowledged, at tick `T', that it has delivered `V'. The caller
%% lets no gone incarnation's acknowledgement through, and {@link drop_superseded/2} left no
%% report of one: a report is this incarnation's, or there is none yet.
-spec note_ack(replica(), hm_vv:vv(), tick(), state()) -> state().
note_ack({Node, Inc}, V, T, RS = #resend{has = H, acked = A}) ->
    H1 = case H of
             #{Node := {Inc, Old}} -> H#{Node := {Inc, hm_vv:join(Old, V)}};
             _ -> H#{Node => {Inc, V}}
         end,
    RS#resend{acked = A#{Node => T}, has = H1}.

%% @doc What member `Peer' reported it has delivered, given `Known', what it is known to
%% have delivered (its acknowledgements, settled or not: where retransmission to it
%% starts).
-spec reported(node(), hm_vv:vv(), state()) -> hm_vv:vv().
reported(Peer, Known, #resend{has = H}) ->
    case H of
        #{Peer := {_, V}} -> hm_vv:join(V, Known);
        _ -> Known
    end.

%% reported/3 of member `M', with what the view knows of it.
reported_by(M, #view{known = K}, RS) -> reported(M, maps:get(M, K, #{}), RS).

%% @doc What member `Peer' reported in its acknowledgements alone, or `none' when none was
%% noted since what it had was last forgotten.
-spec report(node(), state()) -> hm_vv:vv() | none.
report(Peer, #resend{has = H}) ->
    case H of
        #{Peer := {_, V}} -> V;
        _ -> none
    end.

%% @doc Whether member `M' acknowledged within the last `Ticks' ticks of tick `T' (false
%% when it was never heard from).
-spec acked_within(node(), non_neg_integer(), tick(), state()) -> boolean().
acked_within(M, Ticks, T, #resend{acked = A}) ->
    case A of
        #{M := At} -> T - At =< Ticks;
        _ -> false
    end.

%% @doc Whether member `Node' has been silent for more than `Ticks' ticks at tick `T': its
%% last acknowledgement heard here is older. False when none was heard: nothing is known of
%% it.
-spec silent(node(), non_neg_integer(), tick(), state()) -> boolean().
silent(Node, Ticks, T, #resend{acked = A}) ->
    case A of
        #{Node := At} -> T - At > Ticks;
        _ -> false
    end.

%% Whether member `M' acknowledged within the last SILENT_TICKS ticks: only such a member is
%% sent retransmissions, or relays. Unlike silent/4, a member never heard from is not.
acked_lately(M, #view{tick = T}, RS) -> acked_within(M, ?SILENT_TICKS, T, RS).

%% @doc The members are now `Ms' (this replica's node among them): forget the others.
-spec set_members([node()], state()) -> state().
set_members(Ms, RS = #resend{has = H, flight = F, moved = Mv, feeding = Fd, past = P}) ->
    RS#resend{has = maps:with(Ms, H), flight = maps:with(Ms, F), moved = maps:with(Ms, Mv),
              feeding = maps:with(Ms, Fd), past = maps:with(Ms, P)}.

%% @doc Forget what member `Node' reported and what was in flight to it (it went down or
%% came back): retransmission to it waits for its next acknowledgement.
-spec forget_member(node(), state()) -> state().
forget_member(Node, RS = #resend{has = H, flight = F, moved = Mv, feeding = Fd}) ->
    RS#resend{has = maps:remove(Node, H), flight = maps:remove(Node, F),
              moved = maps:remove(Node, Mv), feeding = maps:remove(Node, Fd)}.

%% @doc Forget what the incarnations `Old' takes (`Old(Node, Incarnation)') reported: their
%% state is gone, and a newer incarnation of their node reports for itself.
-spec drop_superseded(fun((node(), term()) -> boolean()), state()) -> state().
drop_superseded(Old, RS = #resend{has = H, past = P}) ->
    RS#resend{has = maps:filter(fun(N, {Inc, _}) -> not Old(N, Inc) end, H),
              past = maps:filter(fun(N, {Inc, _}) -> not Old(N, Inc) end, P)}.

%% @doc For inspection: per member, the tick of its last acknowledgement (`acked'), its
%% incarnation and what it reported delivered (`reported'), and the rounds in flight to it
%% (`flight', `{Cut, [{Tick, Cut}], Window}').
-spec info(state()) -> #{acked := map(), reported := map(), flight := map()}.
info(#resend{acked = A, has = H, flight = F}) -> #{acked => A, reported => H, flight => F}.

%% @doc Logged operations `Peer' has not reported it delivered, in causal order (each one is
%% deliverable at `Peer' once those before it are). `all' gives every one; `old' only those
%% logged at least RESEND_AGE ticks ago if this replica is their origin, RELAY_AGE otherwise
%% (a periodic safety net that does not resend what is still in flight or not acknowledged
%% yet, and leaves resending to the origin first).
-spec missing(node(), all | old, view(), state()) -> [message()].
missing(Peer, Which, View = #view{self = {Node, _}, tick = T, log = L}, RS) ->
    Due = fun(_, _) when Which =:= all -> true;
             ({N, _}, At) when N =:= Node -> At =< T - ?RESEND_AGE;
             (_, At) -> At =< T - ?RELAY_AGE
          end,
    element(1, hm_tcsb_log:walk(reported_by(Peer, View, RS), Due, infinity, L)).

%% @doc This tick's retransmission to `Peer': the next logged operations it has not reported
%% delivered and that are not in flight to it, in causal order, so that at most its window
%% is in flight. A round the peer has not acknowledged within RTO_TICKS ticks was lost (a
%% busy connection dropped it, or a cut): the next round starts again from what it
%% reported. Returns the operations, the log (looked up by sequence number: kept so, see
%% {@link hm_tcsb_log:sorted/1}) and the state.
-spec resend_due(node(), view(), state()) -> {[message()], hm_tcsb_log:log(), state()}.
resend_due(Peer, View0 = #view{tick = T, self = {Node, _}, log = L0},
           RS0 = #resend{window = W0, flight = F}) ->
    case acked_lately(Peer, View0, RS0) of
        false -> {[], L0, RS0};
        true ->
            Has = reported_by(Peer, View0, RS0),
            Seen = maps:get(Peer, RS0#resend.moved, #{}),
            L = hm_tcsb_log:sorted(L0),
            View = View0#view{log = L},
            RS = #resend{moved = Mv} = note_moves(Peer, Has, L, T, RS0),
            Since = fun(O) -> element(2, maps:get(O, maps:get(Peer, Mv), {0, T})) end,
            {Front0, Rounds0, W1} = maps:get(Peer, F, {Has, [], W0}),
            %% stuck on origin `O': not moved on it for STUCK_TICKS, or moved only as far as
            %% this replica relayed it since it was
            Feeding0 = maps:get(Peer, RS0#resend.feeding, #{}),
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
            Relay = relays(Peer, Has, View, RS),
            %% of the logged origins silent or `Peer' is stuck on, those this replica is the
            %% first member alive to have more of than `Peer' (but their own node); and of
            %% those the silent ones
            Silent = fun({N, _}) -> silent(N, ?RESEND_AGE, T, RS) end,
            Lacking = fun(O) -> hm_vv:get(O, Has) < hm_tcsb_log:highest(O, L) end,
            First = first_relays(Peer, Has, fun(O) -> Lacking(O) andalso
                                                          (Silent(O) orelse Stuck(O))
                                            end, View, RS),
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
                                 Room when Room > 0 -> hm_tcsb_log:walk(Front, Due, Room, L);
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
            {Msgs, L, RS#resend{flight = F#{Peer => {Front1, Rounds2, W}},
                                feeding = (RS#resend.feeding)#{Peer => Feeding}}}
    end.

%% Whether this replica relays other origins' operations to `Peer' at once: it is the first
%% node among itself and the members other than `Peer' that acknowledged within SILENT_TICKS
%% and had, RELAY_AGE ticks ago, some operation `Peer' reported it lacks (`Has'). Every
%% member computes the same one while they see the same members alive and the same reports.
%% A member relays what it logged RELAY_AGE ticks ago, so a member that has nothing `Peer'
%% lacks, or got it only lately (restarted, or behind after a cut like `Peer'), cannot relay
%% yet and is passed over. One member relays every origin, in one causal walk: with a relay
%% per origin, an operation of one origin would wait for another member to send the
%% operation of another origin it depends on, then for the acknowledgement, a few
%% operations a tick.
relays(Peer, Has, View = #view{self = {Node, _}}, RS) ->
    Can = [M || M <- may_relay(Peer, View, RS), not hm_vv:leq(reported_before(M, View, RS), Has)],
    %% none: what `Peer' lacks is younger than RELAY_AGE everywhere (its origin resends it)
    Can =/= [] andalso Node =:= lists:min(Can).

%% The logged origins (those `Which' takes) of which `Peer' lacks an operation that this
%% replica is the first member to have, among those alive but the origin's node (looked at
%% only for the origins taken: a tick costs that for every member). When that node has been
%% silent for RESEND_AGE ticks (cut off, or down) it cannot resend them, so this replica
%% relays them as their origin would, without waiting RELAY_AGE ticks (a member that lacks
%% one of them cannot deliver what depends on it, from any origin); and so it does when
%% `Peer' is stuck on the origin (STUCK_TICKS), whoever else is alive: one member, not all
%% of them, relays.
first_relays(Peer, Has, Which, View = #view{self = {Node, _}, log = L, delivered = D}, RS) ->
    Alive = [{M, case M of
                     Node -> D;
                     _ -> reported_by(M, View, RS)
                 end} || M <- may_relay(Peer, View, RS)],
    maps:from_list(
      [{O, true} || O = {N, _} <- hm_tcsb_log:origins(L), N =/= Node, N =/= Peer, Which(O),
                    begin
                        Lacks = hm_vv:get(O, Has),
                        Can = [M || {M, V} <- Alive, M =/= N, hm_vv:get(O, V) > Lacks],
                        Can =/= [] andalso Node =:= lists:min(Can)
                    end]).

%% The members that may relay to `Peer': this replica, and the others alive (acknowledging
%% within SILENT_TICKS) but `Peer'.
may_relay(Peer, View = #view{self = {Node, _}, members = Ms}, RS) ->
    [M || M <- Ms, M =/= Peer, M =:= Node orelse acked_lately(M, View, RS)].

%% What member `M' reported at least RELAY_AGE ticks ago (as far as this replica heard then):
%% it logged those operations at least that long ago, so they are due for relaying there.
%% For this replica itself, what it had delivered RELAY_AGE ticks ago; for another member,
%% what it reported RELAY_AGE - 1 ticks ago: its report arrives here about a tick after it
%% delivered, and every member must see the same relay. With the same age for both, a
%% member would count itself a tick before the others counted it, and two would relay for a
%% tick; with one more tick for itself, none would.
reported_before(M, #view{tick = T, self = {Node, _}}, #resend{past = P}) ->
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

%% @doc Note what every member reports at this tick (for the relay, chosen by what members
%% had RELAY_AGE ticks ago), for its current incarnation; keep the reports newer than
%% RELAY_AGE ticks and the newest older one. Called once a tick, before the tick advances.
-spec note_reports(view(), state()) -> state().
note_reports(View = #view{self = {Node, Self}, members = Ms, tick = T, delivered = D},
             RS = #resend{has = H, past = P}) ->
    P1 = lists:foldl(
           fun(M, Acc) ->
                   case H#{Node => {Self, none}} of
                       #{M := {Inc, _}} ->
                           V = case M of
                                   Node -> D;
                                   _ -> reported_by(M, View, RS)
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
    RS#resend{past = P1}.

trim_reports([E = {At, _} | Rest], T) when At > T - ?RELAY_AGE -> [E | trim_reports(Rest, T)];
trim_reports([E | _], _) -> [E];
trim_reports([], _) -> [].

%% For every origin logged here or reported by `Peer', what `Peer' reported of it and the tick
%% that last changed (an origin that enters the log here has been tracked since `Peer' first
%% reported it: a member stuck on it is seen stuck at once).
note_moves(Peer, Has, L, T, RS = #resend{moved = Mv}) ->
    Old = maps:get(Peer, Mv, #{}),
    New = maps:map(fun(O, _) ->
                           Seq = hm_vv:get(O, Has),
                           case Old of
                               #{O := {Seq, _} = Same} -> Same;
                               _ -> {Seq, T}
                           end
                   end, maps:merge(Has, maps:from_keys(hm_tcsb_log:origins(L), logged))),
    RS#resend{moved = Mv#{Peer => New}}.
