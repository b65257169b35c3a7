%% @doc Catching up by state: an EC table copy far behind a member takes the member's state,
%% key by key, instead of applying its operations one by one, as DottedDB's anti-entropy
%% sends the keys a node misses (the DottedDB paper, *DottedDB: Anti-Entropy without Merkle
%% Trees, Deletes without Tombstones*, §IV.G, Algorithm 3). Part of the
%% per-table core ({@link hm_ec_table}); pure.
%%
%% Invariants: a join never loses an operation either side applied (hm_ec_key:join/2); a
%% state that leaves out keys is taken only by a copy that has delivered what those keys
%% hold; only ready `ram_copies' copies of tables of records take a state.
-module(hm_ec_table_catch_up).
-include("hm_ec_table.hrl").

-export([merge_request/2, merge_request_now/2, merge_request_back/3, also_behind/3,
         merge_state/2, merge/3, merge_asked/4, merge_unasked/3, can_join/1, takes_state/1,
         join_part/4, joined/4, key_rows/2]).

%% asked again after this many ticks without an answer (and a tick more per ?ROWS_PER_TICK
%% rows of the table, or another member would build the same state while the first one
%% still does), unless the member asked is no longer reachable; no state taken again within
%% ?MERGE_RETRY_TICKS
-define(MERGE_RETRY_TICKS, 8).
%% a copy still lacking after this many ticks what a member reported takes its state (the
%% member may be the only one left with those operations, and unable to relay them)
-define(STUCK_TICKS, 24).

%% A copy far behind a member (the other side's operations after a partition heals, a copy
%% that could not keep up) takes the member's state instead of its operations: applying
%% them one by one costs what the backlog holds, and under full load the backlog of a cut of
%% a few seconds took longer to apply than both sides took to make it, while this copy's
%% writers waited behind it (bench/REPORT.md). The state costs what the table holds.
%%
%% A ready copy asks a member for its state (`{merge_req, Delivered}') when it is behind it
%% by more than the option `catch_up' (operations; `infinity', the default, turns this off)
%% and by more than its table's rows, and has not joined a state in the last
%% ?MERGE_RETRY_TICKS ticks: as soon as the member's acknowledgement tells it so
%% (merge_request_now/2), or at a tick, the reachable member it is furthest behind
%% (merge_request/2). At a tick it also asks a member when it still lacks what that member
%% reported ?STUCK_TICKS ticks ago. A member asked that is as far behind the copy that asks
%% asks it back before it answers (merge_request_back/3). The member answers with the
%% metadata of its unstable keys, the rows of its other keys (or only those of the keys its
%% unstable operations touched, when the copy has the rest: merge_state/2) and its delivered
%% vector (`{merge, State}'), or `{merge_none}', and sends the same state to every other member
%% as far behind by its last acknowledgement (also_behind/3), which joins it without having
%% asked when it is far enough behind (merge_unasked/3). The copy joins each key
%% (hm_ec_key:join/2) and counts the member's delivered vector as delivered
%% (hm_tcsb:merge/2); the operations themselves then arrive as duplicates. It does not log
%% them: their origin does, and every copy that received them as operations, until they
%% are stable. A copy that lacks one that only copies caught up by state still have (its
%% loggers crashed) is stuck behind those copies, and takes their state in turn.
%%
%% A `prwset' clear applies to keys that reach a copy after it: each side's unstable clears
%% leave their delete on every key of its state they have not settled on before the join,
%% and the copy keeps both sides' clears. Only tables of records whose copies are all
%% `ram_copies' (the server sets `catch_up' to `infinity' otherwise: a disc copy would have
%% to log the join for a restart, and cannot take a state when stuck); otherwise the copy
%% catches up by operations.
-spec merge_request([node()], #t{}) -> {#t{}, effects()}.
merge_request(Reach, T = #t{catch_up = Lag, tcsb = B, ticks = N, merge_req = Req,
                            behind = Behind0})
  when Lag =/= infinity ->
    D = hm_tcsb:delivered(B),
    %% a member is asked when it acknowledged lately; an idle one acknowledges only every
    %% ?ACK_EVERY ticks, so how long this copy has lacked what it reported is kept while it
    %% is heard from within twice that
    Alive = [M || M <- Reach, hm_tcsb:acked_within(M, ?FLOW_SILENT_TICKS, B)],
    Heard = [M || M <- Reach, hm_tcsb:acked_within(M, ?HEARD_TICKS, B)],
    %% per member: the tick since which this copy lacks something it reported, and what it
    %% reported then
    Behind = maps:from_list(
               [{M, case Behind0 of
                        #{M := {At, Then}} -> case hm_vv:leq(Then, D) of
                                                  true -> {N, Rep};
                                                  false -> {At, Then}
                                              end;
                        _ -> {N, Rep}
                    end} || M <- Heard, Rep <- [hm_tcsb:reported(M, B)],
                            not hm_vv:leq(Rep, D)]),
    T1 = T#t{behind = Behind},
    Due = case Req of
              {Asked, At} ->
                  N - At >= ?MERGE_RETRY_TICKS + hm_ec_store:size(T#t.store) div ?ROWS_PER_TICK
                      orelse not lists:member(Asked, Reach);
              none -> true
          end,
    case Due andalso takes_state(T1) of
        false -> {T1, []};
        true ->
            Far = [{-L, M} || M <- Alive, is_map_key(M, Behind), L <- [far_behind(M, T1)],
                              L > 0],
            Stuck = [{At, M} || {M, {At, _}} <- maps:to_list(Behind), N - At >= ?STUCK_TICKS,
                                lists:member(M, Alive)],
            case lists:sort(Far) ++ lists:sort(Stuck) of
                [{_, M} | _] -> ask_state(M, T1);
                [] -> {T1#t{merge_req = none}, []}
            end
    end;
merge_request(_, T) -> {T, []}.

%% How many operations this copy lacks of what member `M' reported, when that is enough to
%% catch up by state (far_enough/2); 0 otherwise.
far_behind(M, T = #t{tcsb = B}) ->
    L = hm_tcsb:behind(M, B),
    case far_enough(L, T) of
        true -> L;
        false -> 0
    end.

%% Whether lacking `L' operations of a member is enough to take its state: more than the
%% option `catch_up' and than the table's rows, and no state joined within
%% ?MERGE_RETRY_TICKS ticks (what the members made while this copy joined one arrives as
%% operations).
far_enough(L, T = #t{ticks = N, merged_at = At}) ->
    (At =:= none orelse N - At >= ?MERGE_RETRY_TICKS) andalso worth_a_state(L, T).

%% Whether lacking `L' operations is worth a state rather than the operations: more than
%% the option `catch_up' and than the table's rows.
worth_a_state(L, #t{catch_up = Lag, store = St}) -> L > Lag andalso L > hm_ec_store:size(St).

%% Whether this copy would take now a state that has delivered `V' (far_enough/2).
takes_state_of(V, T = #t{tcsb = B}) ->
    takes_state(T) andalso far_enough(hm_vv:missing(V, hm_tcsb:delivered(B)), T).

%% An acknowledgement tells what its member has delivered: when this copy is far behind
%% it (far_behind/2), it asks for its state at once, not at the next tick (after a heal,
%% the first acknowledgement of the other side is the first news of how far behind).
-spec merge_request_now(node(), #t{}) -> {#t{}, effects()}.
merge_request_now(From, T = #t{catch_up = Lag, merge_req = none}) when Lag =/= infinity ->
    case takes_state(T) andalso far_behind(From, T) > 0 of
        true -> ask_state(From, T);
        false -> {T, []}
    end;
merge_request_now(_, T) -> {T, []}.

%% A member that asks for this copy's state tells what it has delivered: when that is far
%% ahead of this copy (far_enough/2), this copy asks it back at once rather than once the
%% member's acknowledgements tell the same. After a heal both sides then join each other's
%% state together, not one after the other.
-spec merge_request_back(node(), hm_vv:vv(), #t{}) -> {#t{}, effects()}.
merge_request_back(From, V, T = #t{catch_up = Lag, merge_req = none}) when Lag =/= infinity ->
    case takes_state_of(V, T) of
        true -> ask_state(From, T);
        false -> {T, []}
    end;
merge_request_back(_, _, T) -> {T, []}.

%% The other members that a state built for `From' would catch up too: those that lack as
%% many of this copy's operations, by their last acknowledgement, as would make them take a
%% state (more than `catch_up' and than the table's rows, measured here). After a heal
%% every copy of the other side is as far behind as the first one to ask: built once, the
%% state goes to all of them, and none waits for this copy to answer it in turn. Not only
%% to the members reachable at the last tick: a heal reconnects them one by one within it
%% (what is sent to a node not connected is dropped).
-spec also_behind(node(), {merge, map()} | {merge_none}, #t{}) -> [node()].
also_behind(From, {merge, _}, T = #t{catch_up = Lag, tcsb = B}) when Lag =/= infinity ->
    D = hm_tcsb:delivered(B),
    Self = ?NODE_OF(B),
    [M || M <- hm_tcsb:members(B), M =/= From, M =/= Self,
          worth_a_state(hm_vv:missing(D, hm_tcsb:reported(M, B)), T)];
also_behind(_, _, _) -> [].

%% A state this copy did not ask for (also_behind/3 at the member that built it, or the
%% late answer to a request since given up): joined only when this copy lacks enough of it
%% to take a state now (far_enough/2; not within ?MERGE_RETRY_TICKS of its last join).
%% The answer to this copy's request of tick `AskedAt': joined, unless this copy joined
%% another state since it asked (after a long cut a copy may be sent one by a member that
%% let go of operations it lacks, hm_ec_table_give_up): then only when it still lacks enough
%% of it to take a state now (what it lacks arrives as operations; a state of a large table
%% costs seconds to join).
-spec merge_asked(node(), non_neg_integer(), {merge, map()}, #t{}) -> {#t{}, effects()}.
merge_asked(From, AskedAt, Msg = {merge, #{delivered := VP}}, T = #t{merged_at = At})
  when At =/= none, At >= AskedAt ->
    case takes_state(T) andalso
        worth_a_state(hm_vv:missing(VP, hm_tcsb:delivered(T#t.tcsb)), T) of
        true -> merge(From, Msg, T);
        false -> {T, []}
    end;
merge_asked(From, _, Msg, T) -> merge(From, Msg, T).

%% A state its sender pushed because this copy lacks operations that left its log unstable
%% (hm_ec_table_give_up) is joined whenever this copy can take one: it has no other way to
%% catch up.
-spec merge_unasked(node(), {merge, map()}, #t{}) -> {#t{}, effects()}.
merge_unasked(From, Msg = {merge, State = #{delivered := VP}}, T) ->
    case hm_ec_table_give_up:is_pushed(State) of
        true ->
            case hm_ec_table_give_up:takes_pushed(State, T) of
                true -> join(From, Msg, T);
                false -> {T, []}
            end;
        false -> merge_asked_for(From, Msg, VP, T)
    end.

merge_asked_for(From, Msg, VP, T) ->
    case takes_state_of(VP, T) of
        true -> merge(From, Msg, T#t{merge_req = none});
        false -> {T, []}
    end.

%% Ask member `M' for its state, telling what this copy has delivered; the request is
%% asked again after ?MERGE_RETRY_TICKS ticks without an answer (merge_request/2).
ask_state(_, T = #t{incoming = In}) when In =/= none ->
    {T, []};                                    % a state is on its way, in parts
ask_state(M, T = #t{tcsb = B, ticks = N}) ->
    {T#t{merge_req = {M, N}}, [{send, M, {merge_req, hm_tcsb:delivered(B)}}]}.

can_merge(#t{status = ready, crdt = none}) -> true;
can_merge(_) -> false.

%% @doc Whether this copy can join a member's state at all: a ready `ram_copies' copy of a
%% table of records (a disc copy would have to log the join for a restart).
-spec can_join(#t{}) -> boolean().
can_join(T = #t{disc = Disc}) -> can_merge(T) andalso not Disc.

%% @doc Whether this copy may take a member's state it asked for: it can join one, and
%% `catch_up' is on.
-spec takes_state(#t{}) -> boolean().
takes_state(T = #t{catch_up = Lag}) -> Lag =/= infinity andalso can_join(T).

%% What a member joins into its state: the metadata of the unstable keys, the rows of the
%% other keys (an unstable key's metadata holds every version its rows show), the delivered
%% vector and the unstable clears.
%%
%% Only the keys a member may lack, when this copy can tell them (`{left_out, Folded,
%% KeyRows}' for the rows): those of its unstable operations, each with its metadata or else
%% its rows (`KeyRows', `[]' for a key they deleted). Every other key holds nothing but
%% operations this copy has forgotten as stable, which are in `Folded'; a member that has
%% delivered `Folded' has them all, and the join would leave its state of such a key as it
%% is. This copy can tell when the member that asked has delivered `Folded' (`Delivered',
%% what it has; the others the state goes to check it themselves, merge/3), no state it
%% caught up with is still to fold (its operations are in no log here), no clear is unstable
%% (a clear touches every key), and it is a table of records; and it does when those keys
%% are fewer than half its rows (otherwise the whole state costs less to build). This is
%% the anti-entropy of the DottedDB paper (§IV.G, Algorithm 3): only the keys of the
%% operations the other node misses, found through those not yet known everywhere. After a
%% short partition of a large table whose writes go to fewer keys, the state is then the
%% keys written since the cut, not the whole table.
-spec merge_state(#t{}, hm_vv:vv()) -> {merge, map()} | {merge_none}.
merge_state(T = #t{store = St, tcsb = B, clears = Cs}, Delivered) ->
    %% not while it holds keys ahead of its delivered vector (hm_ec_table_stream)
    case can_merge(T) andalso not hm_ec_table_stream:is_ahead(T) of
        true ->
            State = #{delivered => hm_tcsb:delivered(B), clears => Cs},
            case changed_keys(T, Delivered) of
                {ok, Keys} ->
                    %% those keys, and every unstable one with its metadata
                    All = maps:keys(lists:foldl(fun(K, Acc) -> Acc#{K => true} end, Keys,
                                                hm_ec_store:meta_keys(St))),
                    case hm_ec_table_stream:in_parts(T) of
                        true ->
                            %% the keys only: their rows and metadata are read as the state
                            %% is cut into parts (hm_ec_table_stream:send_state/3)
                            {merge, State#{rows => {left_out, T#t.folded, {keys, All}},
                                           meta => []}};
                        false ->
                            {KeyRows, MetaRows} = key_rows(All, T),
                            {merge, State#{rows => {left_out, T#t.folded, KeyRows},
                                           meta => MetaRows}}
                    end;
                full ->
                    MetaRows = hm_ec_store:meta_rows(St),
                    Unstable = maps:from_list(MetaRows),
                    Rows = case MetaRows of
                               [] -> hm_ec_store:rows(St);
                               _ -> [R || R <- hm_ec_store:rows(St),
                                          not is_map_key(element(2, R), Unstable)]
                           end,
                    {merge, State#{rows => Rows, meta => MetaRows}}
            end;
        false -> {merge_none}
    end.

%% @doc The keys `Keys' of a state as it goes (merge_state/2): `{KeyRows, MetaRows}', each
%% key with its metadata when it has some, otherwise with its rows (`[]' for a key deleted).
-spec key_rows([term()], #t{}) -> {[{term(), [tuple()]}], [{term(), hm_ec_key:key_state()}]}.
key_rows(Keys, #t{store = St}) ->
    lists:foldr(fun(K, {KR, MR}) ->
                        case hm_ec_store:meta_get(K, St) of
                            {ok, KS} -> {KR, [{K, KS} | MR]};
                            none -> {[{K, hm_ec_store:read(K, St)} | KR], MR}
                        end
                end, {[], []}, Keys).

%% The keys of this copy's unstable operations, each once, when a state may leave out the
%% others for a member that has delivered `Delivered' (merge_state/2); `full' otherwise.
%% Not when they are half the table's rows or more: then the whole state costs less to build
%% (unless it goes in parts: only the keys it lists are read, part by part).
%% The keys of the operations that left the log unstable (hm_ec_table_give_up) are among
%% them.
changed_keys(T = #t{unlisted = false, clears = [], folded = Folded, tcsb = B, store = St,
                    given_up_keys = GivenUp}, Delivered) when is_map(GivenUp) ->
    case hm_vv:leq(Folded, Delivered) of
        true ->
            Most = case hm_ec_table_stream:in_parts(T) of
                       true -> infinity;
                       false -> hm_ec_store:size(St) div 2
                   end,
            %% the unstable keys are among them: as many are enough to say no
            case below(hm_ec_store:meta_size(St), Most) andalso below(map_size(GivenUp), Most)
                andalso hm_tcsb:fold_logged(fun(Msg, Keys) -> logged_key(Msg, Keys, Most) end,
                                            GivenUp, B) of
                Keys when is_map(Keys) ->
                    case below(map_size(Keys), Most) of
                        true -> {ok, Keys};
                        false -> full
                    end;
                _ -> full
            end;
        false -> full
    end;
changed_keys(_, _) -> full.

below(_, infinity) -> true;
below(N, Most) -> N < Most.

logged_key(_, Keys, Most) when is_integer(Most), map_size(Keys) >= Most -> {stop, full};
logged_key({_, _, {_, _, clear}}, _, _) -> {stop, full};
logged_key({_, _, {_, Key, _}}, Keys, _) -> Keys#{Key => true}.

%% Join member `From''s state into this copy's, key by key, then deliver what that made
%% deliverable among the operations waiting here. A state that left out the keys holding only
%% what this copy has delivered (merge_state/2) is joined on its own keys only (and on every
%% key here when this copy has unstable clears, so that they settle on every key: a key it
%% left out joins as this copy holds it). It is not taken when this copy has not delivered
%% what the keys it left out hold (a member builds such a state for the member that asked,
%% and sends it to the others as far behind too).
-spec merge(node(), {merge, map()}, #t{}) -> {#t{}, effects()}.
merge(From, Msg, T) ->
    case takes_state(T) of
        true -> join(From, Msg, T);
        false -> {T, []}
    end.

join(From, {merge, State = #{rows := Rows, delivered := VP, clears := CsP}},
     T = #t{tcsb = B, clears = CsR}) ->
    VR = hm_tcsb:delivered(B),
    Usable = case Rows of
                 {left_out, Folded, _} -> hm_vv:leq(Folded, VR);
                 _ -> true
             end,
    case not hm_vv:leq(VP, VR) andalso Usable
        andalso not hm_ec_table_stream:receiving_other(From, T) of
        false -> {T, []};
        true ->
            %% a transfer in parts from the same member begun anew, or one that stalled, is
            %% given up
            case State of
                #{parts := {Id, Count}, rows := {left_out, _, KeyRows}, meta := MetaRows}
                  when Count > 1 ->
                    hm_ec_table_stream:begin_parts(From, {Id, Count}, VP, {KeyRows, MetaRows},
                                                   T#t{incoming = none});
                _ ->
                    {T1, Keys} = join_keys(State, T#t{incoming = none}),
                    %% both sides' clears, each now settled on every key
                    Clears = case CsR ++ CsP of
                                 [] -> [];
                                 _ ->
                                     All = maps:from_list([{K, true} || K <- Keys]),
                                     [{D, Ts, All} || {D, Ts, _} <- CsR]
                                         ++ [{D, Ts, All} || {D, Ts, _} <- CsP,
                                                             not lists:keymember(D, 1, CsR)]
                             end,
                    joined(From, VP, {keys, length(Keys)}, T1#t{clears = Clears})
            end
    end.

%% @doc Join the keys of a part of a member's state (hm_ec_table_stream) whose delivered
%% vector is `VP': those of `KeyRows' (`{Key, Rows}') and `Meta' (`{Key, KeyState}') only.
-spec join_part([{term(), [tuple()]}], [{term(), hm_ec_key:key_state()}], hm_vv:vv(), #t{}) ->
          {#t{}, [term()]}.
join_part(KeyRows, Meta, VP, T) ->
    join_keys(#{rows => {left_out, #{}, KeyRows}, meta => Meta, delivered => VP, clears => []},
              T).

%% Join a member's state into this copy's, key by key; the keys joined.
join_keys(#{rows := Rows, meta := MetaRows, delivered := VP, clears := CsP},
          T = #t{tcsb = B, store = St0, type = Type, clears = CsR, policy = Policy}) ->
    VR = hm_tcsb:delivered(B),
    Meta = maps:from_list(MetaRows),
    %% the member's rows by key (a set: one each)
    Theirs = case Rows of
                 {left_out, _, KeyRows} -> maps:from_list(KeyRows);
                 _ when Policy =:= siblings ->
                     lists:foldl(fun(R, Acc) ->
                                         K = element(2, R),
                                         Acc#{K => [R | maps:get(K, Acc, [])]}
                                 end, #{}, Rows);
                 _ -> maps:from_list([{element(2, R), [R]} || R <- Rows])
             end,
    %% every key either side holds, each once; only the member's when it left out the
    %% others, unless this copy's clears are to settle on its own
    LeftOut = is_tuple(Rows),
    Own = case LeftOut andalso CsR =:= [] of
              true -> #{};
              false -> maps:from_keys(hm_ec_store:all_keys(St0)
                                      ++ hm_ec_store:meta_keys(St0), [])
          end,
    Keys = maps:keys(maps:merge(maps:merge(Theirs, Meta), Own)),
    {St, Hlc} =
        lists:foldl(
          fun(K, {Acc, H}) ->
                  %% each side's unstable prwset clears leave their delete on the key first,
                  %% where they have not yet (see hm_ec_table_apply:effect/2)
                  {Here, Shown} = hm_ec_table_apply:key_state(K, Acc),
                  Mine = unhandled_clears(Type, K, CsR, Here),
                  Other = case Meta of
                              #{K := KSP} -> unhandled_clears(Type, K, CsP, KSP);
                              %% left out: as this copy holds it
                              _ when LeftOut, not is_map_key(K, Theirs) -> Mine;
                              _ -> unhandled_clears(Type, K, CsP,
                                                    hm_ec_key:new(maps:get(K, Theirs, [])))
                          end,
                  case Mine of
                      Other -> {Acc, H};
                      _ ->
                          KS = hm_ec_key:join({VR, Mine}, {VP, Other}),
                          St1 = hm_ec_table_apply:show(T, K, KS, Shown, Acc),
                          {hm_ec_table_apply:store_meta(T, K, KS, St1), joined_hlc(Policy, H, KS)}
                  end
          end, {St0, T#t.hlc}, Keys),
    {hm_ec_table_stream:touch_all(Keys, T#t{store = St, hlc = Hlc}), Keys}.

%% @doc Count member `From''s delivered vector `VP' as delivered, once every key of its state
%% is joined (`Size': how many keys, or parts), then deliver what that made deliverable among
%% the operations waiting here.
-spec joined(node(), hm_vv:vv(), {keys | parts, non_neg_integer()}, #t{}) -> {#t{}, effects()}.
joined(From, VP, {Unit, N}, T = #t{tcsb = B, tab = Tab, events = Ev}) ->
    VR = hm_tcsb:delivered(B),
    {Ready, B1} = hm_tcsb:merge(VP, B),
    FA = case T#t.fold_after of
             none -> VP;
             FA0 -> hm_vv:join(FA0, VP)
         end,
    T1 = hm_ec_table_flow:flow_changed(
           T#t{tcsb = B1, merges = T#t.merges + 1, behind = #{}, fold_after = FA,
               unlisted = true, merged_at = T#t.ticks}),
    {T2, Evs} = hm_ec_table_apply:apply_ready(T1, Ready, hm_vv:join(VR, VP)),
    {T2,
     [{info, "hypermnesia: ~p caught up by state from ~p (~p ~p)", [Tab, From, N, Unit]}
      | [{event, {merged, VP}} || Ev] ++ Evs]}.

%% A key's state with the delete of every unstable clear of `Cs' that has not settled on the
%% key yet, oldest clear first (as hm_ec_table_apply:effect/2 leaves them before an operation on the
%% key).
unhandled_clears(_Type, _K, [], KS) -> KS;          % no unstable clear: every table but prwset's
unhandled_clears(Type, K, Cs, KS) ->
    lists:foldl(fun({CDot, CTs, Handled}, Acc) ->
                        case maps:is_key(K, Handled) of
                            true -> Acc;
                            false -> hm_ec_key:effect(Type, delete, CDot, CTs, Acc)
                        end
                end, KS, lists:reverse(Cs)).

%% The hybrid clock after a key's join: past the greatest clock of its versions under lww
%% (this copy's clock stays ahead of every write it holds); other policies order no
%% versions by it.
joined_hlc(lww, H, KS) -> max(H, key_hlc(KS));
joined_hlc(_, H, _) -> H.

key_hlc(KS) ->
    lists:foldl(fun({_, {H, _}}, Acc) when is_integer(H) -> max(Acc, H);
                   (_, Acc) -> Acc
                end, 0, hm_ec_key:live(pawset, KS)).
